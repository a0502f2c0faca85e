"""The CPU backend's fast precision: bf16 rounding and bf16 convolutions (kokoro_gpu/ops/bf16*.py).

bf16 rounding is checked against the nearest value with 8 significant bits
worked out from frexp in float64; the convolution against the float64
reference conv (``ops.conv1d``) of the same bf16-rounded operands (only
float32 accumulation may differ) and against the exact conv (bf16's own error,
about 2^-9 of each operand); the AdaIN that hands the generator's convs
their inputs already rounded against ``ops.adain`` rounded afterwards, and
the conv on such an input against the conv rounding the same values itself.
Skipped where bf16 GEMMs cannot run here (no oneMKL wheel, or a CPU without
BF16 instructions).
"""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_gpu import ops
from kokoro_gpu.ops import bf16, bf16_conv, norm

pytestmark = pytest.mark.skipif(bf16.unavailable_reason() is not None,
                                reason=f"bf16 GEMMs unavailable: {bf16.unavailable_reason()}")


def _nearest_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to 8 significant bits, ties away from zero (float64, normal numbers)."""
    mantissa, exponent = np.frexp(x.astype(np.float64))  # |mantissa| in [0.5, 1)
    scaled = mantissa * 256
    return np.sign(scaled) * np.floor(np.abs(scaled) + 0.5) / 256 * np.exp2(exponent)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def test_to_bf16_rounds_to_nearest_ties_away(rng: np.random.Generator) -> None:
    x = (rng.standard_normal(4000) * np.exp2(rng.integers(-20, 20, 4000))).astype(np.float32)
    ties = np.array([1 + 2.0**-8, -(1 + 2.0**-8), 3 * 2.0**-9 + 1, 1 + 2.0**-9, 0.0], dtype=np.float32)
    x = np.concatenate([x, ties])
    got = _from_bits(bf16.bf16_array(x))
    np.testing.assert_array_equal(got, _nearest_bf16(x))
    assert list(got[-5:]) == [1 + 2.0**-7, -(1 + 2.0**-7), 1 + 2.0**-7, 1.0, 0.0]


_SHAPES = [  # (c_in, c_out, k, pad, dilation, t_len): narrow (below 256 channels) and wide inputs
    (16, 8, 3, 1, 1, 300),
    (24, 40, 11, 25, 5, 257),  # dilated "same"
    (32, 5, 7, 0, 3, 100),  # "valid"
    (8, 16, 11, 30, 1, 4),  # input shorter than the kernel: the window is mostly padding
    (300, 20, 3, 5, 5, 230),
    (256, 12, 5, 2, 1, 3),
    (22, 64, 1, 0, 1, 150),  # 1x1: one GEMM
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("c_in", "c_out", "k", "pad", "dilation", "t_len"), _SHAPES)
def test_bf16_conv_is_the_conv_of_rounded_operands(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch,
    c_in: int, c_out: int, k: int, pad: int, dilation: int, t_len: int, bias: bool,
) -> None:
    # Small chunks and splits: several chunks per worker, windows cut at both ends of x.
    monkeypatch.setattr(bf16_conv, "_CHUNK_COLUMNS", 37)
    monkeypatch.setattr(bf16_conv, "_WIDE_CHUNK_COLUMNS", 41)
    monkeypatch.setattr(bf16_conv, "_SPLIT_MIN_COLUMNS", 50)
    x = rng.standard_normal((c_in, t_len)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, k)) / np.sqrt(c_in * k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) if bias else None
    y = bf16_conv.BF16Conv1d(w, b, pad, dilation)(x)
    rounded = ops.conv1d(_nearest_bf16(x), _nearest_bf16(w), None if b is None else b.astype(np.float64),
                         pad=pad, dilation=dilation)
    assert y.dtype == np.float32 and y.shape == rounded.shape
    np.testing.assert_allclose(y, rounded, rtol=0, atol=2e-6 * np.abs(rounded).max())


def test_bf16_conv_error_is_bf16s(rng: np.random.Generator) -> None:
    """Against the exact conv: about bf16's rounding of both operands, no more."""
    x = rng.standard_normal((128, 5000)).astype(np.float32)
    w = (rng.standard_normal((128, 128, 7)) / np.sqrt(128 * 7)).astype(np.float32)
    y = bf16_conv.BF16Conv1d(w, None, 3)(x)
    exact = ops.conv1d(x.astype(np.float64), w.astype(np.float64), pad=3)
    err = np.linalg.norm(y - exact) / np.linalg.norm(exact)
    assert 1e-3 < err < 4e-3  # two operands of 8 significant bits: ~2^-9 sqrt(2) / sqrt(3)


def test_bf16_conv_rejects_mismatched_inputs() -> None:
    conv = bf16_conv.BF16Conv1d(np.ones((4, 3, 5), dtype=np.float32), None, pad=0)
    with pytest.raises(ValueError, match="channels"):
        conv(np.ones((2, 10), dtype=np.float32))
    with pytest.raises(ValueError, match="too short"):
        conv(np.ones((3, 4), dtype=np.float32))


@pytest.mark.parametrize("act", ["snake", "leaky_relu"])
def test_adain_bf16_is_adain_rounded_with_zero_margins(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, act: str
) -> None:
    monkeypatch.setattr(norm, "_BLOCK_ELEMS", 500)  # blocks of a few channels, on both workers
    x = (rng.standard_normal((12, 130)) * 2 + 0.5).astype(np.float32)
    gb = rng.standard_normal(24).astype(np.float32)
    alpha = (rng.random(12) + 0.2).astype(np.float32)
    seq = bf16_conv.adain_bf16(x, gb, 5, act, alpha=alpha)
    assert seq.shape == x.shape and seq.bits.shape == (12, 140) and seq.margin == 5
    want = bf16.bf16_array(ops.adain(x, gb, act, alpha=alpha))
    np.testing.assert_array_equal(seq.bits[:, 5:-5], want)
    assert not seq.bits[:, :5].any() and not seq.bits[:, -5:].any()


@pytest.mark.parametrize(("c_in", "k", "dilation"), [(24, 7, 3), (300, 3, 1)])
def test_bf16_conv_reads_a_rounded_input_in_place(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, c_in: int, k: int, dilation: int
) -> None:
    monkeypatch.setattr(bf16_conv, "_CHUNK_COLUMNS", 37)
    monkeypatch.setattr(bf16_conv, "_WIDE_CHUNK_COLUMNS", 41)
    monkeypatch.setattr(bf16_conv, "_SPLIT_MIN_COLUMNS", 50)
    x = rng.standard_normal((c_in, 200)).astype(np.float32)
    gb = np.zeros(2 * c_in, dtype=np.float32)  # AdaIN with gamma = beta = 0: the instance norm
    w = (rng.standard_normal((16, c_in, k)) / np.sqrt(c_in * k)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    pad = dilation * (k - 1) // 2
    conv = bf16_conv.BF16Conv1d(w, b, pad, dilation)
    seq = bf16_conv.adain_bf16(x, gb, pad)
    from_float = conv(ops.adain(x, gb))  # the same bf16 operands, rounded by the conv itself
    np.testing.assert_allclose(conv(seq), from_float, rtol=0, atol=1e-6 * np.abs(from_float).max())
    with pytest.raises(ValueError, match="margins"):
        conv(bf16_conv.adain_bf16(x, gb, pad + 1))
