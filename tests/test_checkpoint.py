"""Checkpoint folding / validation at full size, and model resolution (hub faked)."""

from __future__ import annotations

import math
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors.numpy import save_file

from kokoro_gpu.checkpoint import (
    DEFAULT_REPO_ID,
    ModelFiles,
    fold_official,
    fold_weight_norm,
    load_checkpoint,
    resolve_model,
)
from kokoro_gpu.config import DEFAULT_CONFIG_PATH, ModelConfig
from kokoro_gpu.errors import CheckpointError
from kokoro_gpu.layout import folded_layout, official_layout
from kokoro_gpu.pth import read_pth

TINY = Path(__file__).parent / "data" / "tiny"
CONV = "text_encoder.module.cnn.1.0"  # Conv1d [512, 512, 5], weight norm per output channel
UPS = "decoder.module.generator.ups.1"  # ConvTranspose1d [256, 128, 12], per input channel

Weights = dict[str, np.ndarray]


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return ModelConfig.load()


@pytest.fixture(scope="module")
def official(config: ModelConfig) -> Weights:
    """A full-size random checkpoint in the official flat layout (views into one buffer)."""
    shapes = official_layout(config)
    buf = np.random.default_rng(7).standard_normal(sum(math.prod(s) for s in shapes.values()),
                                                   dtype=np.float32)
    out, at = {}, 0
    for name, shape in shapes.items():
        n = math.prod(shape)
        out[name] = buf[at : at + n].reshape(shape)
        at += n
    return out


@pytest.fixture(scope="module")
def folded(official: Weights, config: ModelConfig) -> Weights:
    return fold_official(official, config)


def test_full_size_manifest_count(official: Weights) -> None:
    assert len(official) == 548
    assert sum(a.size for a in official.values()) == pytest.approx(81.76e6, rel=1e-3)


def test_safetensors_round_trip(official: Weights, folded: Weights,
                                config: ModelConfig, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file(official, path)
    loaded = load_checkpoint(path, config)
    layout = folded_layout(config)
    assert list(loaded) == list(layout)
    for name, arr in loaded.items():
        assert arr.shape == layout[name] and arr.dtype == np.float32 and arr.flags.c_contiguous, name
        np.testing.assert_array_equal(arr, folded[name], err_msg=name)


def test_plain_tensors_renamed_unchanged(official: Weights, folded: Weights) -> None:
    for src, dst in [
        ("bert.module.embeddings.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"),
        ("bert_encoder.module.weight", "bert_encoder.weight"),
        ("predictor.module.lstm.weight_hh_l0_reverse", "predictor.lstm.weight_hh_l0_reverse"),
        ("bert.module.pooler.bias", "bert.pooler.bias"),
    ]:
        np.testing.assert_array_equal(folded[dst], official[src])


def test_conv1d_fold_per_output_channel(official: Weights, folded: Weights) -> None:
    g, v = official[f"{CONV}.weight_g"], official[f"{CONV}.weight_v"]
    w = folded["text_encoder.cnn.1.0.weight"]
    for o in (0, 17, 511):
        norm = math.sqrt(sum(float(x) ** 2 for x in v[o].ravel()))
        np.testing.assert_allclose(w[o], v[o] * (float(g[o, 0, 0]) / norm), rtol=2e-6, atol=1e-7)


def test_conv_transpose_fold_per_input_channel(official: Weights,
                                               folded: Weights) -> None:
    g, v = official[f"{UPS}.weight_g"], official[f"{UPS}.weight_v"]
    assert g.shape == (256, 1, 1) and v.shape == (256, 128, 12)
    w = folded["decoder.generator.ups.1.weight"]
    for c in (0, 100, 255):
        norm = math.sqrt(sum(float(x) ** 2 for x in v[c].ravel()))
        np.testing.assert_allclose(w[c], v[c] * (float(g[c, 0, 0]) / norm), rtol=2e-6, atol=1e-7)
        # Each input channel's slice has norm |g|: the norm is not per output channel.
        assert np.linalg.norm(w[c].astype(np.float64)) == pytest.approx(abs(float(g[c, 0, 0])), rel=1e-5)


@pytest.mark.parametrize(("pth", "key_prefix", "g_suffix", "v_suffix"), [
    ("tiny.pth", "", ".weight_g", ".weight_v"),
    ("tiny_param.pth", "param.", ".parametrizations.weight.original0", ".parametrizations.weight.original1"),
])
def test_fold_matches_torch(pth: str, key_prefix: str, g_suffix: str, v_suffix: str) -> None:
    state = {f"{t}.{k}": a for t, sd in read_pth(TINY / pth).items() for k, a in sd.items()}
    with np.load(TINY / "tiny_folded.npz") as z:
        want = {k[len(key_prefix):]: z[k] for k in z.files if k.startswith(key_prefix) and
                (key_prefix or not k.startswith("param."))}
    assert len(want) == 2
    for stem, w in want.items():
        np.testing.assert_allclose(fold_weight_norm(state[stem + g_suffix], state[stem + v_suffix]), w,
                                   rtol=1e-6, atol=1e-7)


def test_nested_parametrizations_and_no_module_prefix(official: Weights,
                                                      folded: Weights,
                                                      config: ModelConfig) -> None:
    renamed = {"weight_g": "parametrizations.weight.original0",
               "weight_v": "parametrizations.weight.original1"}
    nested: dict[str, dict[str, np.ndarray]] = {}
    for key, arr in official.items():
        top, _, rest = key.partition(".module.")
        stem, _, last = rest.rpartition(".")
        rest = f"{stem}.{renamed[last]}" if last in renamed else rest
        nested.setdefault(top, {})[f"module.{rest}" if top == "bert" else rest] = arr
    again = fold_official(nested, config)
    assert list(again) == list(folded)
    for name in folded:
        np.testing.assert_array_equal(again[name], folded[name], err_msg=name)


def test_other_float_dtypes_become_float32(official: Weights, config: ModelConfig) -> None:
    key = "bert.module.embeddings.LayerNorm.weight"
    half = {**official, key: official[key].astype(np.float16)}
    out = fold_official(half, config)
    assert out["bert.embeddings.LayerNorm.weight"].dtype == np.float32
    np.testing.assert_array_equal(out["bert.embeddings.LayerNorm.weight"], half[key].astype(np.float32))


def _error(state: dict[str, np.ndarray], config: ModelConfig) -> str:
    with pytest.raises(CheckpointError) as info:
        fold_official(state, config)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_missing_renamed_reshaped_named(official: Weights, config: ModelConfig) -> None:
    bad = dict(official)
    del bad["bert.module.pooler.weight"]
    bad["predictor.module.lstm.bias_ih_l0_typo"] = bad.pop("predictor.module.lstm.bias_ih_l0")
    bad[f"{UPS}.weight_g"] = official[f"{UPS}.weight_g"].reshape(256)
    bad["decoder.module.F0_conv.bias"] = np.zeros(2, np.float32)
    emb = "text_encoder.module.embedding.weight"
    bad[emb] = official[emb].astype(np.int32)
    msg = _error(bad, config)
    assert "2 missing (bert.module.pooler.weight, predictor.module.lstm.bias_ih_l0)" in msg
    assert "1 unexpected (predictor.module.lstm.bias_ih_l0_typo)" in msg
    assert f"{UPS}.weight_g (256,) (expected (256, 1, 1))" in msg
    assert "decoder.module.F0_conv.bias (2,) (expected (1,))" in msg
    assert "1 not floating point (text_encoder.module.embedding.weight (int32))" in msg


def test_long_lists_are_shortened(official: Weights, config: ModelConfig) -> None:
    bad = {k: v for k, v in official.items() if not k.startswith("decoder.")}
    n_decoder = sum(k.startswith("decoder.") for k in official)
    msg = _error(bad, config)
    assert f"{n_decoder} missing (" in msg
    assert f"and {n_decoder - 4} more)" in msg


def test_duplicate_weight_norm_forms(official: Weights, config: ModelConfig) -> None:
    bad = dict(official)
    bad[f"{CONV}.parametrizations.weight.original0"] = official[f"{CONV}.weight_g"]
    assert f"1 unexpected ({CONV}.parametrizations.weight.original0)" in _error(bad, config)


def test_folded_weight_in_place_of_pair_is_refused(official: Weights, config: ModelConfig) -> None:
    bad = {k: v for k, v in official.items() if not k.startswith(CONV + ".weight_")}
    bad[f"{CONV}.weight"] = official[f"{CONV}.weight_v"]
    msg = _error(bad, config)
    assert f"2 missing ({CONV}.weight_g, {CONV}.weight_v)" in msg
    assert f"1 unexpected ({CONV}.weight)" in msg


def test_not_a_state_dict(config: ModelConfig) -> None:
    with pytest.raises(CheckpointError, match="expected a dict"):
        fold_official([1, 2], config)
    with pytest.raises(CheckpointError, match=r"'bert\.x' is a str, not a tensor"):
        fold_official({"bert": {"x": "y"}}, config)


def test_tiny_pth_is_rejected_with_names(config: ModelConfig) -> None:
    with pytest.raises(CheckpointError, match=r"missing .*unexpected \(.*module\.lstm"):
        load_checkpoint(TINY / "tiny.pth", config)


def test_file_errors(tmp_path: Path, config: ModelConfig) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "none.safetensors", config)
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(CheckpointError, match=r"not a readable \.safetensors"):
        load_checkpoint(tmp_path / "bad.safetensors", config)
    with pytest.raises(CheckpointError, match=r"unknown checkpoint type '\.ckpt'"):
        load_checkpoint(tmp_path / "model.ckpt", config)


# --- model resolution ---------------------------------------------------------------


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_local_directory(tmp_path: Path) -> None:
    cfg = _touch(tmp_path / "config.json")
    ckpt = _touch(tmp_path / "kokoro-v1_0.pth")
    _touch(tmp_path / "other.safetensors")  # kokoro-v1_0.pth wins
    (tmp_path / "voices").mkdir()
    assert resolve_model(str(tmp_path)) == ModelFiles(cfg, ckpt, tmp_path / "voices", None)


def test_local_directory_single_other_checkpoint(tmp_path: Path) -> None:
    _touch(tmp_path / "config.json")
    ckpt = _touch(tmp_path / "converted.safetensors")
    files = resolve_model(str(tmp_path))
    assert files.checkpoint_path == ckpt and files.voices_dir is None and files.repo_id is None


def test_local_directory_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        resolve_model(str(tmp_path))
    _touch(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=r"^no checkpoint files"):
        resolve_model(str(tmp_path))
    _touch(tmp_path / "a.pth")
    _touch(tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError, match=r"2 \(a\.pth, b\.safetensors\) checkpoint files"):
        resolve_model(str(tmp_path))


def test_checkpoint_file_with_and_without_config(tmp_path: Path) -> None:
    ckpt = _touch(tmp_path / "m.pth")
    assert resolve_model(str(ckpt)) == ModelFiles(DEFAULT_CONFIG_PATH, ckpt, None, None)
    cfg = _touch(tmp_path / "config.json")
    assert resolve_model(str(ckpt)).config_path == cfg
    with pytest.raises(CheckpointError, match="not a checkpoint file"):
        resolve_model(str(cfg))


def test_nonexistent_path() -> None:
    with pytest.raises(CheckpointError, match=r'^model path /no/such/dir/anywhere does not exist.*model="/'):
        resolve_model("/no/such/dir/anywhere")
    with pytest.raises(CheckpointError, match=r"neither an existing file or directory nor"):
        resolve_model("no-such-model")


def test_hub_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(*, repo_id: str, filename: str, local_files_only: bool) -> str:
        calls.append((repo_id, filename, local_files_only))
        return str(_touch(tmp_path / "cache" / filename))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    files = resolve_model(DEFAULT_REPO_ID, local_files_only=True)
    assert files == ModelFiles(tmp_path / "cache/config.json", tmp_path / "cache/kokoro-v1_0.pth",
                               None, DEFAULT_REPO_ID)
    assert calls == [(DEFAULT_REPO_ID, "config.json", True), (DEFAULT_REPO_ID, "kokoro-v1_0.pth", True)]


@pytest.mark.parametrize("exc", [
    LocalEntryNotFoundError("Cannot find the requested files in the disk cache\nand outgoing traffic is off"),
    OSError("Network is unreachable"),
    ValueError("Repo id must be in the form 'repo_name' or 'namespace/repo_name'"),
])
def test_hub_failure_says_how_to_work_offline(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def fake(**_: object) -> str:
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    # The hub answers (so these failures are the download's own, wherever the test runs).
    monkeypatch.setattr("kokoro_gpu.checkpoint.hub_unreachable_reason", lambda: None)
    with pytest.raises(CheckpointError) as info:
        resolve_model("someone/not-a-model")
    msg = str(info.value)
    assert "\n" not in msg
    assert "'someone/not-a-model'" in msg and 'model="/path/to/dir"' in msg
    assert type(exc).__name__ in msg


def test_local_directory_is_not_sent_to_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(**_: object) -> str:
        raise AssertionError("hub called for a local directory")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.chdir(tmp_path)
    _touch(tmp_path / "owner" / "name" / "config.json")
    ckpt = _touch(tmp_path / "owner" / "name" / "m.pth")
    # "owner/name" also looks like a repo id: an existing directory takes precedence.
    assert resolve_model("owner/name").checkpoint_path.resolve() == ckpt


EMB = "text_encoder.module.embedding.weight"


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda a: a.__setitem__((0, 0), np.nan), "non-finite"),
    (lambda a: a.fill(-np.inf), "non-finite"),
    (lambda a: a.__setitem__((3, 3), 1e38), "values up to 1e+38"),
    (lambda a: a.__setitem__((3, 3), -2e6), "values up to 2e+06"),
])
def test_non_finite_or_absurd_weights_refused_by_name(official: Weights, config: ModelConfig,
                                                      edit, problem: str) -> None:
    bad = dict(official)
    bad[EMB] = official[EMB].copy()
    edit(bad[EMB])
    msg = _error(bad, config)
    assert f"{EMB} has {problem}" in msg and "\n" not in msg


def test_zero_norm_weight_norm_refused(official: Weights, config: ModelConfig) -> None:
    bad = dict(official)
    bad[f"{CONV}.weight_v"] = official[f"{CONV}.weight_v"].copy()
    bad[f"{CONV}.weight_v"][5] = 0.0
    assert f"{CONV}.weight_v has an output channel of zero norm" in _error(bad, config)


def test_byte_swapped_checkpoint_refused_at_load(official: Weights, config: ModelConfig) -> None:
    # The bytes of every tensor reversed but read as native: what a byte-order mix-up gives.
    swapped = {k: v.byteswap() for k, v in official.items()}
    assert "values up to" in _error(swapped, config)


def test_non_native_byte_order_is_converted(official: Weights, folded: Weights,
                                            config: ModelConfig) -> None:
    big_endian = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in official.items()}
    got = fold_official(big_endian, config)
    for name, arr in folded.items():
        assert got[name].dtype == np.float32 and got[name].dtype.isnative, name
        np.testing.assert_array_equal(got[name], arr, err_msg=name)


def test_oversized_safetensors_refused_before_reading(tmp_path: Path, config: ModelConfig,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import kokoro_gpu.checkpoint as checkpoint

    path = tmp_path / "big.safetensors"
    save_file({"x": np.zeros(1000, np.float32)}, path)
    monkeypatch.setattr(checkpoint, "checkpoint_byte_limit", lambda cfg: 100)
    with pytest.raises(CheckpointError, match=r"more than the 100 a file of this kind may hold"):
        load_checkpoint(path, config)
