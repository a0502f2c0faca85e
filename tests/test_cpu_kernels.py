"""The CPU backend's fused kernels (kokoro_gpu._cpu, native/cpu) against their NumPy references."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu import ops
from kokoro_gpu.model.blocks import Conv1d, Params
from kokoro_gpu.ops import fast_conv, kernels

if kernels.native is None:
    if os.environ.get("CI"):  # the CI's install has a C++ compiler: the kernels must be there
        pytest.fail("kokoro_gpu._cpu is not built", pytrace=False)
    pytest.skip("the CPU kernels (kokoro_gpu._cpu) are not built", allow_module_level=True)

ACTS = (None, "leaky_relu", "snake")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def _reference(monkeypatch: pytest.MonkeyPatch, *args, **kwargs) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(kernels, "native", None)
        return ops.adain(*args, **kwargs)


def _inputs(rng: np.random.Generator, channels: int, length: int) -> tuple[np.ndarray, ...]:
    x = (rng.standard_normal((channels, length)) * rng.uniform(0.1, 5, (channels, 1))
         + rng.uniform(-3, 3, (channels, 1))).astype(np.float32)
    gb = rng.standard_normal(2 * channels).astype(np.float32)
    alpha = rng.uniform(0.1, 20, channels).astype(np.float32)
    return x, gb, alpha


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize(("channels", "length"), [(1, 1), (3, 7), (5, 300), (64, 4099), (256, 1000)])
def test_adain_kernel_matches_reference(rng, monkeypatch, act, channels, length):
    """Within float32 rounding of the NumPy reference and of the float64 truth."""
    x, gb, alpha = _inputs(rng, channels, length)
    fused = ops.adain(x, gb, act, alpha=alpha)
    reference = _reference(monkeypatch, x, gb, act, alpha=alpha)
    truth = ops.adain(x.astype(np.float64), gb.astype(np.float64), act, alpha=alpha.astype(np.float64))
    assert fused.dtype == np.float32 and fused.shape == x.shape
    scale = np.abs(truth).max()
    np.testing.assert_allclose(fused, truth, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(fused, reference, rtol=0, atol=4e-6 * scale)
    if length == 1:  # a constant row: normalised to zero, then beta
        np.testing.assert_allclose(ops.adain(x, gb, None), gb[channels:, None], atol=1e-6)


def test_adain_kernel_strided_rows_and_out(rng, monkeypatch):
    """x a view with strided rows (and a transposed one), the result written into a view of a larger array."""
    big = rng.standard_normal((12, 520)).astype(np.float32)
    x = big[::2, 7:507]
    gb = rng.standard_normal(12).astype(np.float32)
    alpha = rng.uniform(0.5, 3, 6).astype(np.float32)
    canvas = np.full((6, 540), 9.0, dtype=np.float32)
    out = canvas[:, 20:520]
    assert ops.adain(x, gb, "snake", alpha=alpha, out=out) is out
    np.testing.assert_allclose(out, _reference(monkeypatch, x, gb, "snake", alpha=alpha), atol=1e-5)
    assert (canvas[:, :20] == 9).all() and (canvas[:, 520:] == 9).all()
    xt = np.ascontiguousarray(x.T).T  # unit stride along channels, not time
    np.testing.assert_array_equal(ops.adain(xt, gb, "snake", alpha=alpha),
                                  ops.adain(x, gb, "snake", alpha=alpha))
    with pytest.raises(ValueError, match="does not match"):
        ops.adain(x, gb, out=np.empty((6, 499), dtype=np.float32))


def test_snake_kernel_large_and_special_arguments(monkeypatch):
    """Snake's sin^2 where the argument is large (beta shifts y to ~5e3, inside the polynomial's range
    reduction, and ~2e4, past it): off the float64 truth only by y's own float32 rounding (~ulp(y),
    which moves sin^2 by about as much); NaN and infinity give NaN in their rows, as the reference."""
    x = np.stack([np.linspace(-1, 1, 4096)] * 3).astype(np.float32)
    gb = np.array([0.0, 0.0, 0.0, 0.0, 5000.0, 20000.0], dtype=np.float32)
    alpha = np.ones(3, dtype=np.float32)
    fused = ops.adain(x, gb, "snake", alpha=alpha)
    y = ops.adain(x.astype(np.float64), gb.astype(np.float64))
    truth = y + np.sin(y) ** 2
    error = np.abs(fused - truth).max(axis=1)
    assert error[0] < 1e-6 and error[1] < 3e-3 and error[2] < 1e-2, error
    bad = x[:2].copy()
    bad[0, 5] = np.nan
    bad[1, 9] = np.inf
    with np.errstate(invalid="ignore"):
        fused = ops.adain(bad, gb[[0, 1, 3, 4]], "snake", alpha=alpha[:2])
        reference = _reference(monkeypatch, bad, gb[[0, 1, 3, 4]], "snake", alpha=alpha[:2])
    assert np.isnan(fused).all() and np.isnan(reference).all()


def test_adain_kernel_checks_its_arguments():
    x = np.ones((2, 5), dtype=np.float32)
    one = np.ones(2, dtype=np.float32)
    with pytest.raises(ValueError, match="contiguous rows"):
        kernels.native.adain_rows(np.ones((2, 5, 1), dtype=np.float32), x, one, one, "none")
    with pytest.raises(ValueError, match="same shape"):
        kernels.native.adain_rows(x, np.ones((2, 4), dtype=np.float32), one, one, "none")
    with pytest.raises(ValueError, match="one value per row"):
        kernels.native.adain_rows(x, np.empty_like(x), np.ones(3, dtype=np.float32), one, "none")
    with pytest.raises(ValueError, match="needs alpha"):
        kernels.native.adain_rows(x, np.empty_like(x), one, one, "snake")
    with pytest.raises(ValueError, match="unknown activation"):
        kernels.native.adain_rows(x, np.empty_like(x), one, one, "gelu")


@pytest.mark.parametrize(("k", "dilation"), [(3, 1), (3, 5), (7, 3), (11, 1)])
def test_conv_after_adain_matches_composition(rng, k, dilation):
    """The generator's AdaIN written into its conv's padded input equals the conv of the AdaIN's result."""
    channels, length = 64, 500
    w = (rng.standard_normal((channels, channels, k)) / np.sqrt(channels * k)).astype(np.float32)
    weights = {"c.weight": w, "c.bias": rng.standard_normal(channels).astype(np.float32)}
    conv = Conv1d(Params(weights, np.float32).sub("c"), dilation=dilation, method=None)
    x, gb, alpha = _inputs(rng, channels, length)
    np.testing.assert_array_equal(conv.after_adain(x, gb, alpha),
                                  conv(ops.adain(x, gb, "snake", alpha=alpha)))


def test_a_source_checkout_uses_the_installed_copys_kernels(tmp_path, monkeypatch):
    """kokoro_gpu imported from a checkout (no built module in it) loads the kernels of a copy elsewhere
    on sys.path, so that a server started in the checkout computes what the installed package does."""
    installed = tmp_path / "site" / "kokoro_gpu"
    installed.mkdir(parents=True)
    built = Path(kernels.native.__file__)
    (installed / built.name).symlink_to(built)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(tmp_path / "site")])
    module = kernels._installed_copy()
    assert module is not None and Path(module.__spec__.origin).parent == installed
    x, gb, alpha = _inputs(np.random.default_rng(0), 4, 50)
    out = np.empty_like(x)
    module.adain_rows(x, out, gb[:4], gb[4:], "snake", alpha=alpha)
    np.testing.assert_array_equal(out, ops.adain(x, gb, "snake", alpha=alpha))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere")])
    assert kernels._installed_copy() is None


# -------------------------------------------------------------------- LSTM


def _lstm_weights(rng: np.random.Generator, inputs: int, hidden: int, scale: float) -> tuple[np.ndarray, ...]:
    w_ih = (rng.standard_normal((2, 4 * hidden, inputs)) * scale / np.sqrt(inputs)).astype(np.float32)
    w_hh = (rng.standard_normal((2, 4 * hidden, hidden)) * scale / np.sqrt(hidden)).astype(np.float32)
    b = (rng.standard_normal((2, 4 * hidden)) * scale).astype(np.float32)
    return w_ih, w_hh, b


@pytest.mark.parametrize(("steps", "inputs", "hidden", "scale"), [
    (1, 3, 2, 1.0), (9, 5, 7, 1.0), (40, 16, 24, 3.0), (200, 64, 128, 1.0), (60, 32, 16, 30.0)])
def test_lstm_kernel_matches_reference(rng, monkeypatch, steps, inputs, hidden, scale):
    """Within float32 rounding of the NumPy loop and of its float64 run; hidden sizes off the kernel's
    64-gate blocks and saturated gates (scale 30) included."""
    x = rng.standard_normal((steps, inputs)).astype(np.float32)
    weights = _lstm_weights(rng, inputs, hidden, scale)
    fused = ops.lstm_bidirectional(x, *weights)
    with monkeypatch.context() as m:
        m.setattr(kernels, "native", None)
        reference = ops.lstm_bidirectional(x, *weights)
    truth = ops.lstm_bidirectional(x.astype(np.float64), *(w.astype(np.float64) for w in weights))
    assert fused.dtype == np.float32 and fused.shape == (steps, 2 * hidden)
    # As close to the float64 run as the float32 reference is (large weights amplify the inputs'
    # rounding step by step in both), and within a few float32 ulps of it where they do not.
    error, reference_error = np.abs(fused - truth).max(), np.abs(reference - truth).max()
    assert error <= 2 * reference_error + 1e-6, (error, reference_error)
    if scale <= 3:
        assert error <= 2e-6
    # Each direction on its own: the forward one's first step and the reverse one's last step see
    # only their first input.
    one = ops.lstm_bidirectional(x[:1], *weights)
    np.testing.assert_allclose(fused[0, :hidden], one[0, :hidden], rtol=0, atol=1e-6)


def test_lstm_kernel_activations_against_float64(monkeypatch):
    """exp, the logistic function and tanh of the kernel over their whole float32 range, through a
    one-unit LSTM whose gates are set by the input alone: h = o tanh(i g) with f unused at step one."""
    tiny = np.geomspace(1e-8, 1, 200)
    v = np.concatenate([np.linspace(-100, 100, 20001), tiny, -tiny,
                        [0.0, 0.624, 0.625, 0.626, -0.625, 87.0, -87.0, 89.0, -89.0]])
    x = v.astype(np.float32)[:, None]
    w_ih = np.zeros((2, 4, 1), np.float32)
    w_ih[:, 0] = w_ih[:, 2] = w_ih[:, 3] = 1.0  # i, g, o = v; f = 0
    w_hh = np.zeros((2, 4, 1), np.float32)
    b = np.zeros((2, 4), np.float32)
    h = np.empty(len(x), np.float32)
    for k in range(len(x)):  # one step each (a fresh state)
        h[k] = ops.lstm_bidirectional(x[k : k + 1], w_ih, w_hh, b)[0, 0]
    xd = x[:, 0].astype(np.float64)
    sig = 1 / (1 + np.exp(-xd))
    want = sig * np.tanh(sig * np.tanh(xd))
    np.testing.assert_allclose(h, want, rtol=4e-7, atol=1e-30)


# ------------------------------------------------------- fast conv transforms

TRANSFORMS = [("winograd", 3), ("dft", 7), ("dft", 11)]


def _prepared(rng: np.random.Generator, method: str, k: int, c_in: int, c_out: int, dilation: int,
              bias: bool) -> tuple[fast_conv.PreparedConv1d, np.ndarray, np.ndarray | None]:
    """A float32 conv of random weights (scaled to unit gain) with its weights and bias."""
    w = (rng.standard_normal((c_out, c_in, k)) / np.sqrt(c_in * k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) if bias else None
    return fast_conv.PreparedConv1d(w, b, pad=dilation * (k - 1) // 2, dilation=dilation, method=method), w, b


@pytest.mark.parametrize(("method", "k"), TRANSFORMS)
@pytest.mark.parametrize("dilation", [1, 3, 5])
@pytest.mark.parametrize(("tiles", "bias"), [(1, True), (13, False), (37, True), (200, True)])
def test_inverse_tiles_kernel_matches_reference(rng, monkeypatch, method, k, dilation, tiles, bias):
    """Fold, A^T, bias and the store in time order (the dilation's interleave) into a chunk's columns of
    a larger output: within float32 rounding of the NumPy reference and of the float64 truth (a sum of
    32 products at most: 2e-6 of the largest output); nothing written outside the chunk's columns (the
    kernel stores a tile's outputs as whole vectors that overlap the next tile's)."""
    conv = _prepared(rng, method, k, 8, 6, dilation, bias)[0]
    points, m = conv.point_w.shape[0], conv.m
    products = rng.standard_normal((points, 6, dilation * tiles)).astype(np.float32)
    canvas = np.full((6, (tiles + 4) * m * dilation), 7.0, dtype=np.float32)
    first = 3 * m * dilation
    chunk = canvas[:, first : first + tiles * m * dilation]
    fast_conv.inverse_tiles(products.copy(), conv.pairs, conv.inverse_t, conv.b, chunk, dilation)
    with monkeypatch.context() as mp:
        mp.setattr(kernels, "native", None)
        reference = np.empty_like(chunk)
        fast_conv.inverse_tiles(products.copy(), conv.pairs, conv.inverse_t, conv.b, reference, dilation)
        truth = np.empty(chunk.shape)
        fast_conv.inverse_tiles(products.astype(np.float64), conv.pairs, conv.inverse_t.astype(np.float64),
                                None if conv.b is None else conv.b.astype(np.float64), truth, dilation)
    scale = np.abs(truth).max()
    np.testing.assert_allclose(chunk, truth, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(chunk, reference, rtol=0, atol=4e-6 * scale)
    assert (canvas[:, :first] == 7).all() and (canvas[:, first + chunk.shape[1] :] == 7).all()


@pytest.mark.parametrize(("method", "k"), TRANSFORMS)
@pytest.mark.parametrize("dilation", [1, 3, 5])
@pytest.mark.parametrize("tiles", [1, 13, 37, 200])
def test_forward_tiles_kernel_matches_reference(rng, monkeypatch, method, k, dilation, tiles):
    """B^T of the tiles and the Gauss sums, from a view with strided rows that ends where the last tile
    does: within float32 rounding (a sum of 32 products at most: 2e-6 of the largest point); NaN past
    the view's end reaches no point."""
    conv = _prepared(rng, method, k, 5, 4, dilation, False)[0]
    points, m, n = conv.point_w.shape[0], conv.m, conv.n
    length = dilation * ((tiles - 1) * m + n)
    canvas = np.full((5, length + 40), np.nan, dtype=np.float32)
    canvas[:, 9 : 9 + length] = rng.standard_normal((5, length))
    x = canvas[:, 9 : 9 + length]
    fused = np.full((points, 5, dilation * tiles), np.nan, dtype=np.float32)
    fast_conv.forward_tiles(x, conv.forward_t, conv.pairs, fused, m, dilation)
    with monkeypatch.context() as mp:
        mp.setattr(kernels, "native", None)
        reference = np.empty_like(fused)
        fast_conv.forward_tiles(x, conv.forward_t, conv.pairs, reference, m, dilation)
        truth = np.empty(fused.shape)
        fast_conv.forward_tiles(x.astype(np.float64), conv.forward_t.astype(np.float64), conv.pairs, truth, m,
                                dilation)
    scale = np.abs(truth).max()
    np.testing.assert_allclose(fused, truth, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(fused, reference, rtol=0, atol=4e-6 * scale)


@pytest.mark.parametrize(("method", "k"), TRANSFORMS)
@pytest.mark.parametrize("dilation", [1, 3, 5])
@pytest.mark.parametrize(("chunk_columns", "workers"), [(None, 1), (300, 2)])
def test_prepared_conv1d_with_kernels_matches_definition(rng, monkeypatch, method, k, dilation,
                                                         chunk_columns, workers):
    """The whole conv with both kernels against ops.conv1d in float64 (the definition) and against its
    NumPy path: within float32 rounding (relative error norm 5e-6, as the NumPy path's own test); an
    odd tile count, chunks ending mid-range, a last partial chunk, two threads writing side by side."""
    monkeypatch.setattr(fast_conv, "worker_count", lambda: workers)
    monkeypatch.setattr(fast_conv, "_MIN_PART_TILES", 1)  # short ranges split too
    if chunk_columns:
        monkeypatch.setattr(fast_conv, "_CHUNK_COLUMNS", chunk_columns)
    for bias in (False, True):
        conv, w, b = _prepared(rng, method, k, 16, 12, dilation, bias)
        x = rng.standard_normal((16, 1733)).astype(np.float32)
        fused = conv(x)
        with monkeypatch.context() as mp:
            mp.setattr(kernels, "native", None)
            reference = conv(x)
        b64 = None if b is None else b.astype(np.float64)
        truth = ops.conv1d(x.astype(np.float64), w.astype(np.float64), b64, pad=conv.pad, dilation=dilation)
        assert fused.shape == truth.shape and fused.dtype == np.float32
        assert np.linalg.norm(fused - truth) / np.linalg.norm(truth) < 5e-6
        np.testing.assert_allclose(fused, reference, rtol=0, atol=1e-5 * np.abs(truth).max())


def test_conv_transform_kernels_check_their_arguments():
    native = kernels.native
    products = np.zeros((47, 4, 30), dtype=np.float32)
    inverse_t = np.zeros((32, 22), dtype=np.float32)
    y = np.zeros((4, 10 * 22 * 3), dtype=np.float32)
    native.conv_inverse_tiles(products, inverse_t, None, y, 15, 3)
    with pytest.raises(ValueError, match="C-contiguous 3-D float32"):
        native.conv_inverse_tiles(products.astype(np.float64), inverse_t, None, y, 15, 3)
    with pytest.raises(ValueError, match="C-contiguous 3-D float32"):
        native.conv_inverse_tiles(products[:, :, ::2], inverse_t, None, y[:, :330], 15, 3)
    with pytest.raises(ValueError, match="inverse_t"):
        native.conv_inverse_tiles(products, inverse_t[:31], None, y, 15, 3)
    with pytest.raises(ValueError, match="inverse_t"):
        native.conv_inverse_tiles(products, np.zeros((32, 40), np.float32), None,
                                  np.zeros((4, 10 * 40 * 3), np.float32), 15, 3)
    with pytest.raises(ValueError, match="multiple of the dilation"):
        native.conv_inverse_tiles(products, inverse_t, None, y, 15, 4)
    with pytest.raises(ValueError, match="pairs"):
        native.conv_inverse_tiles(products, inverse_t, None, y, 16, 3)
    with pytest.raises(ValueError, match="y must be"):
        native.conv_inverse_tiles(products, inverse_t, None, y[:, :-1], 15, 3)
    with pytest.raises(ValueError, match="one value per row"):
        native.conv_inverse_tiles(products, inverse_t, np.zeros(3, np.float32), y, 15, 3)
    x = np.zeros((4, 3 * (9 * 22 + 32)), dtype=np.float32)
    forward_t = np.zeros((32, 32), dtype=np.float32)
    native.conv_forward_tiles(x, forward_t, products, 15, 22, 3)
    with pytest.raises(ValueError, match="x must be"):
        native.conv_forward_tiles(x[:, :-1], forward_t, products, 15, 22, 3)
    with pytest.raises(ValueError, match="forward_t"):
        native.conv_forward_tiles(x, np.zeros((24, 24), np.float32), products, 15, 22, 3)
    with pytest.raises(ValueError, match="points must"):
        native.conv_forward_tiles(x, forward_t, products[:, :, ::2], 15, 22, 3)
    with pytest.raises(ValueError, match="n \\+ pairs rows"):
        native.conv_forward_tiles(x, forward_t, products, 14, 22, 3)
    with pytest.raises(ValueError, match="m must be"):
        native.conv_forward_tiles(x, forward_t, products, 15, 33, 3)
