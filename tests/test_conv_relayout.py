"""The conv weight relayouts of the native engine (native/ops/conv_relayout.cu), on the host: no GPU.

The relayouts are host code; this test compiles them with the system C++ compiler into a small driver
(native/tools/conv_relayout_tool.cpp), which needs the CUDA headers (cuda_fp16.h, and the cuBLAS
headers that ops.h names) but no GPU, and checks each layout against NumPy:
- the ops' layout moves the kernel axis to the middle;
- half rows hold fp16(w * scale) (split: plus fp16 of the remainder) with scale a power of two, the
  rows padded to a multiple of 8 with zeros;
- a strided conv's polyphase rows put tap k of channel co at its phase and polyphase tap.
Skipped where no C++ compiler or no CUDA headers are found.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from host_tools import build_tool, needs_cxx_and_cuda_headers

pytestmark = needs_cxx_and_cuda_headers


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("relayout") / "conv_relayout_tool"
    return build_tool(
        out, ["native/tools/conv_relayout_tool.cpp", "native/ops/conv_relayout.cu"], cuda_headers=True
    )


def run(tool: Path, args: list[str], data: np.ndarray) -> bytes:
    return subprocess.run(
        [str(tool), *args],
        input=np.ascontiguousarray(data, np.float32).tobytes(),
        capture_output=True,
        check=True,
    ).stdout


def half_rows(raw: bytes) -> tuple[float, np.ndarray]:
    scale = float(np.frombuffer(raw[:4], np.float32)[0])
    return scale, np.frombuffer(raw[4:], np.float16)


def test_layout(tool: Path) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 7, 3)).astype(np.float32)
    got = np.frombuffer(run(tool, ["layout", "5", "7", "3"], w), np.float32).reshape(5, 3, 7)
    np.testing.assert_array_equal(got, w.transpose(0, 2, 1))


@pytest.mark.parametrize("form", ["rounded", "split"])
def test_half_rows(tool: Path, form: str) -> None:
    rng = np.random.default_rng(1)
    a, k, b = 6, 3, 13  # b padded to 16
    w = (rng.standard_normal((a, k, b)) * 1e-3).astype(np.float32)
    scale, halves = half_rows(run(tool, ["half", str(a), str(k), str(b), form], w))
    assert scale > 0 and np.log2(scale) == np.round(np.log2(scale))  # a power of two
    parts = 2 if form == "split" else 1
    rows = halves.reshape(parts, a * k, 16).astype(np.float64)
    assert np.all(rows[:, :, b:] == 0)
    scaled = w.reshape(a * k, b).astype(np.float64) / scale
    np.testing.assert_array_equal(rows[0, :, :b], scaled.astype(np.float32).astype(np.float16))
    assert np.max(np.abs(scaled)) >= 2**13  # scaled up, far from FP16's underflow
    value = rows[:, :, :b].sum(axis=0) * scale
    tol = 2.0**-20 if form == "split" else 2.0**-10
    assert np.max(np.abs(value - w.reshape(a * k, b))) <= tol * np.max(np.abs(w))


def test_polyphase_rows(tool: Path) -> None:
    cout, k, cin, stride, pad = 3, 12, 5, 6, 3  # the generator's noise conv's shape, smaller
    rng = np.random.default_rng(2)
    w = rng.standard_normal((cout, k, cin)).astype(np.float32)  # the ops' layout [Cout, K, Cin]
    scale, halves = half_rows(run(tool, ["polyphase", str(cout), str(k), str(cin), str(stride), str(pad)], w))
    # Polyphase taps m from floor(-pad / stride) to floor((K - 1 - pad) / stride).
    m_lo, m_hi = -((pad + stride - 1) // stride), (k - 1 - pad) // stride
    taps, ld = m_hi - m_lo + 1, 8
    rows = halves.reshape(cout, taps, stride, ld).astype(np.float64) * scale
    want = np.zeros((cout, taps, stride, ld))
    for tap in range(k):
        m, p = divmod(tap - pad, stride)
        want[:, m - m_lo, p, :cin] = w[:, tap, :]
    assert np.max(np.abs(rows - want)) <= 2.0**-10 * np.max(np.abs(w))
