"""kokoro-convert: faithful .safetensors output, voice packs, refusal to clobber, one-line errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from kokoro_gpu import convert as convert_module
from kokoro_gpu.checkpoint import fold_official, load_checkpoint
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.layout import official_layout
from kokoro_gpu.voices import VoiceStore

TINY = Path(__file__).parent / "data" / "tiny"


@pytest.fixture(scope="module")
def official() -> dict[str, dict[str, np.ndarray]]:
    """A full-size checkpoint as read_pth returns it: five state dicts, each tensor one constant."""
    nested: dict[str, dict[str, np.ndarray]] = {}
    for i, (name, shape) in enumerate(official_layout(ModelConfig.load()).items()):
        top, _, key = name.partition(".")
        nested.setdefault(top, {})[key] = np.full(shape, 0.5 + i / 1000, dtype=np.float32)
    return nested


@pytest.fixture
def fake_pth(official: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The reader itself is tested in test_pth.py; here it hands back the full-size checkpoint."""
    src = tmp_path / "kokoro-v1_0.pth"
    src.write_bytes(b"")
    monkeypatch.setattr(convert_module, "read_pth", lambda path: official if Path(path) == src else None)
    return src


def run(capsys: pytest.CaptureFixture, *argv: object) -> tuple[int, str, str]:
    rc = convert_module.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, *fragments: str) -> None:
    assert rc == 2
    assert err.startswith("kokoro-convert: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_output_is_the_official_structure(official: dict, fake_pth: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "model.safetensors"
    rc, stdout, _ = run(capsys, fake_pth, out)
    assert rc == 0 and f"wrote {out}" in stdout
    written = load_file(out)
    want = {f"{top}.{key}": arr for top, sd in official.items() for key, arr in sd.items()}
    assert sorted(written) == sorted(want)
    assert "decoder.module.generator.ups.0.weight_g" in written  # weight norm kept as stored
    for name, arr in want.items():
        assert written[name].dtype == np.float32
        np.testing.assert_array_equal(written[name], arr, err_msg=name)
    with safe_open(out, framework="np") as f:
        assert f.metadata() == {"format": "kokoro-official", "source": "kokoro-v1_0.pth"}
    config = ModelConfig.load()
    folded, reference = load_checkpoint(out, config), fold_official(official, config)
    assert list(folded) == list(reference)
    for name in reference:
        np.testing.assert_array_equal(folded[name], reference[name], err_msg=name)


def test_never_overwrites_without_flag(fake_pth: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "model.safetensors"
    out.write_bytes(b"precious")
    rc, _, err = run(capsys, fake_pth, out)
    assert_one_line_error(rc, err, str(out), "--overwrite")
    assert out.read_bytes() == b"precious"
    rc, _, _ = run(capsys, fake_pth, out, "--overwrite")
    assert rc == 0 and len(load_file(out)) == 548


def test_voice_packs(fake_pth: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src, dst = tmp_path / "voices", tmp_path / "converted"
    src.mkdir()
    shutil.copy(TINY / "voice.pt", src / "af_ramp.pt")
    other = np.random.default_rng(3).standard_normal((510, 1, 256)).astype(np.float32)
    np.save(src / "bm_other.npy", other)
    rc, stdout, _ = run(capsys, fake_pth, tmp_path / "m.safetensors", "--voices", src, "--voices-out", dst)
    assert rc == 0 and f"wrote {dst / 'bm_other.safetensors'}" in stdout
    assert sorted(p.name for p in dst.iterdir()) == ["af_ramp.safetensors", "bm_other.safetensors"]
    ramp = ((np.arange(510 * 256) % 1009) / 1009.0 - 0.5).astype(np.float32).reshape(510, 1, 256)
    np.testing.assert_array_equal(load_file(dst / "af_ramp.safetensors")["voice"], ramp)
    store = VoiceStore(dst, None)
    np.testing.assert_array_equal(store.load("bm_other"), other)
    np.testing.assert_array_equal(store.load("af_ramp"), ramp)


def test_voice_archive(fake_pth: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A voices archive of any name (an .npz of packs) converts pack by pack; a corrupt one is one
    line and leaves nothing, as for a model's voices-v1.0.bin."""
    packs = {name: np.random.default_rng(seed).standard_normal((510, 1, 256)).astype(np.float32)
             for seed, name in enumerate(("jf_one", "jm_two"))}
    archive, dst = tmp_path / "voices_ja.npz", tmp_path / "converted"
    np.savez(archive, **packs)
    rc, _, _ = run(capsys, fake_pth, tmp_path / "m.safetensors", "--voices", archive, "--voices-out", dst)
    assert rc == 0 and sorted(p.name for p in dst.iterdir()) == ["jf_one.safetensors", "jm_two.safetensors"]
    for name, pack in packs.items():
        np.testing.assert_array_equal(load_file(dst / f"{name}.safetensors")["voice"], pack)

    corrupt = tmp_path / "voices-v1.0.bin"
    corrupt.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    out = tmp_path / "again.safetensors"
    rc, _, err = run(capsys, fake_pth, out, "--voices", corrupt, "--voices-out", tmp_path / "v2")
    assert_one_line_error(rc, err, "voice archive", str(corrupt))
    assert not out.exists() and not (tmp_path / "v2").exists()


def test_existing_voice_output_stops_before_writing_anything(fake_pth: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    src, dst = tmp_path / "voices", tmp_path / "converted"
    src.mkdir()
    dst.mkdir()
    shutil.copy(TINY / "voice.pt", src / "af_ramp.pt")
    (dst / "af_ramp.safetensors").write_bytes(b"old")
    out = tmp_path / "m.safetensors"
    rc, _, err = run(capsys, fake_pth, out, "--voices", src, "--voices-out", dst)
    assert_one_line_error(rc, err, "af_ramp.safetensors", "--overwrite")
    assert not out.exists()


def test_layout_mismatch_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out" / "m.safetensors"
    rc, _, err = run(capsys, TINY / "tiny.pth", out)
    assert_one_line_error(rc, err, "does not match the model layout", "missing")
    assert not out.parent.exists()


@pytest.mark.parametrize(("args", "fragment"), [
    (("evil.pth",), "refusing to load"),
    (("nope.pth",), "checkpoint file not found"),
    (("tiny.pth", "--config", "/no/such/config.json"), "config file not found"),
])
def test_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture, args: tuple[str, ...],
                      fragment: str) -> None:
    rc, _, err = run(capsys, TINY / args[0], tmp_path / "m.safetensors", *args[1:])
    assert_one_line_error(rc, err, fragment)
    assert list(tmp_path.iterdir()) == []


def test_output_must_be_safetensors(fake_pth: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, _, err = run(capsys, fake_pth, tmp_path / "m.pth")
    assert_one_line_error(rc, err, "must end in .safetensors")


def test_voices_options_go_together(fake_pth: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        convert_module.main([str(fake_pth), str(tmp_path / "m.safetensors"), "--voices", str(tmp_path)])
    assert info.value.code == 2
