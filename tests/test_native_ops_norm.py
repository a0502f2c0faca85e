"""CUDA norms (LayerNorm over rows and channels, AdaLayerNorm, AdaIN) against the NumPy reference
ops.

Every test draws fresh random inputs (tests/native_ops.py), runs the op on the GPU through the
test bindings kokoro_gpu._native.ops (outputs filled with NaN first, so an unwritten element
fails) and compares with the reference op in float64, normwise. Skipped without a GPU or a
native module built with its test bindings.
"""

from __future__ import annotations

import numpy as np
import pytest
from native_ops import (
    LONG_REDUCTION_TOL,
    SHORT_REDUCTION_TOL,
    check,
    f32,
    f64,
    gpu,
    reduction_tol,
)

from kokoro_gpu import ops as ref
from kokoro_gpu.errors import BackendError

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols", [(1, 768), (7, 640), (513, 128), (3, 1), (5, 33), (9, 1024)])
@pytest.mark.parametrize("eps", [1e-12, 1e-5])
@pytest.mark.parametrize("in_place", [False, True])
def test_layer_norm_rows(rng: np.random.Generator, rows: int, cols: int, eps: float, in_place: bool) -> None:
    x = f32(rng.standard_normal((rows, cols)) * 3 + 1)
    g, b = f32(rng.standard_normal(cols)), f32(rng.standard_normal(cols))
    check(
        f"layer_norm rows {rows}x{cols} eps={eps}",
        gpu.layer_norm(x, False, g, b, eps=eps, in_place=in_place),
        ref.layer_norm(f64(x), -1, f64(g), f64(b), eps),
        SHORT_REDUCTION_TOL,
    )


def test_layer_norm_rows_x_bias(rng: np.random.Generator) -> None:
    """LayerNorm of x + b (the producing linear's bias fused in), against the float64 LN of the
    float32 sum, and bit-equal to adding the bias first."""
    x, xb = f32(rng.standard_normal((37, 768)) * 3), f32(rng.standard_normal(768))
    g, b = f32(rng.standard_normal(768)), f32(rng.standard_normal(768))
    got = gpu.layer_norm(x, False, g, b, eps=1e-12, x_bias=xb)
    want = ref.layer_norm(f64(x + xb), -1, f64(g), f64(b), 1e-12)
    check("layer_norm rows x_bias", got, want, SHORT_REDUCTION_TOL)
    np.testing.assert_array_equal(got, gpu.layer_norm(x + xb, False, g, b, eps=1e-12))


def test_layer_norm_rows_into_wider_rows(rng: np.random.Generator) -> None:
    """The duration encoder's AdaLayerNorm writes the first columns of a wider buffer (y_pitch):
    those equal the LayerNorm, the others stay untouched."""
    x, sg, sb = (f32(rng.standard_normal(shape)) for shape in ((41, 512), 512, 512))
    got = gpu.layer_norm(x, False, None, None, sg, sb, eps=1e-5, y_pitch=640)
    np.testing.assert_array_equal(got[:, :512], gpu.layer_norm(x, False, None, None, sg, sb, eps=1e-5))
    assert np.all(got[:, 512:].view(np.uint32) == 0xFFFFFFFF)


def test_layer_norm_rows_too_wide() -> None:
    with pytest.raises(BackendError, match="at most 1024"):
        gpu.layer_norm(np.zeros((2, 1025), np.float32))


@pytest.mark.parametrize("rows,cols", [(1, 640), (37, 640), (100, 129)])
def test_ada_layer_norm_rows(rng: np.random.Generator, rows: int, cols: int) -> None:
    x = f32(rng.standard_normal((rows, cols)))
    style = f32(rng.standard_normal(2 * cols) * 0.5)
    got = gpu.layer_norm(x, False, style_gamma=style[:cols], style_beta=style[cols:], eps=1e-5)
    check(f"ada_layer_norm {rows}x{cols}", got, ref.ada_layer_norm(f64(x), f64(style)), SHORT_REDUCTION_TOL)


@pytest.mark.parametrize("c,t_len", [(640, 1), (512, 37), (129, 300), (1, 5)])
@pytest.mark.parametrize("in_place", [False, True])
def test_layer_norm_channels(rng: np.random.Generator, c: int, t_len: int, in_place: bool) -> None:
    x = f32(rng.standard_normal((c, t_len)) * 2 - 1)
    g, b = f32(rng.standard_normal(c)), f32(rng.standard_normal(c))
    got = gpu.layer_norm(x, True, g, b, eps=1e-5, in_place=in_place)
    check(
        f"layer_norm channels {c}x{t_len}",
        got,
        ref.layer_norm(f64(x), 0, f64(g), f64(b), 1e-5),
        SHORT_REDUCTION_TOL,
    )
    style = f32(rng.standard_normal(2 * c) * 0.5)
    got = gpu.layer_norm(x, True, style_gamma=style[:c], style_beta=style[c:], eps=1e-5, in_place=in_place)
    want = ref.ada_layer_norm(f64(x).T, f64(style)).T
    check(f"ada_layer_norm channels {c}x{t_len}", got, want, SHORT_REDUCTION_TOL)


@pytest.mark.parametrize("c,t_len", [(1, 1), (64, 7), (257, 1001), (128, 36001), (2, 300007)])
@pytest.mark.parametrize("act", ["none", "leaky_relu", "snake"])
@pytest.mark.parametrize("in_place", [False, True])
def test_adain(rng: np.random.Generator, c: int, t_len: int, act: str, in_place: bool) -> None:
    x = f32(rng.standard_normal((c, t_len)) * 2 + 0.5)
    style = f32(rng.standard_normal(2 * c) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c))
    got = gpu.adain(x, style, act, 0.2, alpha if act == "snake" else None, in_place)
    want = ref.adain(f64(x), f64(style), None if act == "none" else act, 0.2, f64(alpha))
    check(f"adain {act} {c}x{t_len}", got, want, reduction_tol(t_len))


def test_adain_long_rows_repeatable(rng: np.random.Generator) -> None:
    """Split statistics (offset mean) combine in a fixed order: identical bits every run."""
    x = f32(rng.standard_normal((3, 120001)) * 0.5 + 40.0)
    style = f32(rng.standard_normal(6) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, 3))
    first = gpu.adain(x, style, "snake", 0.2, alpha, False)
    want = ref.adain(f64(x), f64(style), "snake", 0.2, f64(alpha))
    check("adain long rows", first, want, LONG_REDUCTION_TOL)
    for _ in range(3):
        assert np.array_equal(gpu.adain(x, style, "snake", 0.2, alpha, False), first)
