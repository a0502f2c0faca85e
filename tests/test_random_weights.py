"""Random checkpoints: official layout, determinism, the phase-input variant, model directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu.checkpoint import fold_official, load_checkpoint, resolve_model
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.layout import folded_layout, official_layout
from kokoro_gpu.random_weights import (
    PHASE_INPUT_CHANNELS,
    checkpoint_digest,
    flatten_official,
    random_checkpoint,
    random_voice_pack,
    write_model_dir,
)
from kokoro_gpu.voices import VoiceStore

MANIFEST = Path("/work/shared/kokoro/checkpoint_manifest.tsv")
NOISE_CONVS = tuple(f"decoder.module.generator.noise_convs.{i}.weight" for i in range(2))


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return ModelConfig.load()


@pytest.fixture(scope="module")
def ckpt(config: ModelConfig) -> dict[str, dict[str, np.ndarray]]:
    return random_checkpoint(config, 0)


@pytest.fixture(scope="module")
def flat(ckpt: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return flatten_official(ckpt)


def test_official_structure(ckpt: dict[str, dict[str, np.ndarray]], flat: dict[str, np.ndarray],
                            config: ModelConfig) -> None:
    assert list(ckpt) == ["bert", "bert_encoder", "predictor", "text_encoder", "decoder"]
    assert all(k.startswith("module.") for sd in ckpt.values() for k in sd)
    assert {k: v.shape for k, v in flat.items()} == official_layout(config)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in flat.values())


@pytest.mark.skipif(not MANIFEST.is_file(), reason="official checkpoint manifest not available")
def test_matches_official_manifest(flat: dict[str, np.ndarray]) -> None:
    rows = [line.split("\t") for line in MANIFEST.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    manifest = {r[0]: tuple(int(d) for d in r[1].strip("()").split(",") if d.strip()) for r in rows}
    assert {k: tuple(v.shape) for k, v in flat.items()} == manifest


def test_deterministic_per_seed(config: ModelConfig, ckpt: dict[str, dict[str, np.ndarray]]) -> None:
    again = random_checkpoint(config, 0)
    other = random_checkpoint(config, 1)
    assert checkpoint_digest(again) == checkpoint_digest(ckpt)
    assert checkpoint_digest(other) != checkpoint_digest(ckpt)
    key = "module.encode.conv1.weight_v"
    np.testing.assert_array_equal(again["decoder"][key], ckpt["decoder"][key])
    assert not np.array_equal(other["decoder"][key], ckpt["decoder"][key])


def test_zero_phase_inputs_zeroes_exactly_those_channels(config: ModelConfig,
                                                         flat: dict[str, np.ndarray]) -> None:
    zeroed = flatten_official(random_checkpoint(config, 0, zero_phase_inputs=True))
    for name in NOISE_CONVS:
        assert zeroed[name].shape[1] == 22
        assert not zeroed[name][:, PHASE_INPUT_CHANNELS].any()
        np.testing.assert_array_equal(zeroed[name][:, :11], flat[name][:, :11])
        assert np.abs(flat[name][:, PHASE_INPUT_CHANNELS]).min() > 0
    changed = [k for k in flat if not np.array_equal(flat[k], zeroed[k])]
    assert sorted(changed) == sorted(NOISE_CONVS)


def test_trained_like_scales(flat: dict[str, np.ndarray]) -> None:
    """The knobs that make the network behave like a trained one (see the module docstring)."""
    alphas = [v for k, v in flat.items() if ".alpha" in k]
    assert alphas and all(0.5 < a.min() and a.max() < 1.5 for a in alphas)
    for k in ("bert.module.embeddings.LayerNorm.weight", "text_encoder.module.cnn.0.1.gamma"):
        assert abs(float(flat[k].mean()) - 1.0) < 0.05
    assert 150 < float(flat["predictor.module.F0_proj.bias"][0]) < 200
    assert all(v.min() > 0 for k, v in flat.items() if k.endswith("weight_g"))


def test_fold_official_accepts_it(config: ModelConfig, ckpt: dict[str, dict[str, np.ndarray]]) -> None:
    folded = fold_official(ckpt, config)
    assert {k: v.shape for k, v in folded.items()} == folded_layout(config)


def test_voice_pack() -> None:
    pack = random_voice_pack(3)
    assert pack.shape == (510, 1, 256) and pack.dtype == np.float32
    assert 0.1 < float(pack.std()) < 0.4
    np.testing.assert_array_equal(pack, random_voice_pack(3))
    assert not np.array_equal(pack, random_voice_pack(4))
    # Neighbouring rows (phoneme counts) differ only slightly, as in the official packs.
    assert float(np.abs(np.diff(pack[:, 0], axis=0)).max()) < 0.01


def test_write_model_dir_round_trip(tmp_path: Path, config: ModelConfig,
                                    ckpt: dict[str, dict[str, np.ndarray]]) -> None:
    root = write_model_dir(tmp_path / "model", seed=0, voices=("af_heart", "am_adam"))
    files = resolve_model(str(root))
    assert files.checkpoint_path.name == "kokoro-v1_0.safetensors"
    assert json.loads((root / "config.json").read_text(encoding="utf-8")) == config.raw
    loaded = load_checkpoint(files.checkpoint_path, ModelConfig.load(files.config_path))
    expected = fold_official(ckpt, config)
    assert loaded.keys() == expected.keys()
    for k in expected:
        np.testing.assert_array_equal(loaded[k], expected[k])
    store = VoiceStore(files.voices_dir, None)
    assert store.available() == ["af_heart", "am_adam"]
    np.testing.assert_array_equal(store.load("af_heart"), random_voice_pack(0))
    np.testing.assert_array_equal(store.load("am_adam"), random_voice_pack(1))
