"""The build backend: which CUDA library wheels a build needs, and the wheel declaring them."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
METADATA = (
    "Metadata-Version: 2.1\nName: kokoro-gpu\nVersion: 0.1.0\nRequires-Dist: numpy>=1.24\n"
    "Provides-Extra: test\nDescription-Content-Type: text/markdown\n\n# kokoro_gpu\n\nText.\n"
)


@pytest.fixture(scope="module")
def backend() -> ModuleType:
    pytest.importorskip("scikit_build_core")
    path = ROOT / "build_backend" / "backend.py"
    spec = importlib.util.spec_from_file_location("kokoro_build_backend", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_metadata_gets_the_requirements_in_its_headers(backend: ModuleType) -> None:
    out = backend.with_requirements(METADATA, ["nvidia-cublas>=13,<14", "numpy>=1.24"])
    head, body = out.split("\n\n", 1)
    assert head.splitlines()[-1] == "Requires-Dist: nvidia-cublas>=13,<14"
    assert head.count("Requires-Dist: numpy>=1.24") == 1  # not added twice
    assert body == "# kokoro_gpu\n\nText.\n"


def _wheel(path: Path, with_engine: bool) -> Path:
    files = {"kokoro_gpu/__init__.py": b"x = 1\n", "kokoro-gpu-0.1.0.dist-info/METADATA": METADATA.encode()}
    if with_engine:
        files["kokoro_gpu/_native.cpython-311-x86_64-linux-gnu.so"] = b"\x7fELF"
    record = [f"{n},sha256=old,{len(d)}" for n, d in files.items()] + ["kokoro-gpu-0.1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("kokoro-gpu-0.1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_a_wheel_with_the_engine_declares_its_libraries(backend: ModuleType, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "kokoro_gpu-0.1.0-cp311-cp311-linux_x86_64.whl", with_engine=True)
    assert backend.add_requirements_to_wheel(wheel, ["nvidia-cublas>=13,<14"])
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read("kokoro-gpu-0.1.0.dist-info/METADATA")
        record = z.read("kokoro-gpu-0.1.0.dist-info/RECORD").decode().splitlines()
        assert z.read("kokoro_gpu/__init__.py") == b"x = 1\n"
    assert b"Requires-Dist: nvidia-cublas>=13,<14\n" in metadata
    digest = base64.urlsafe_b64encode(hashlib.sha256(metadata).digest()).rstrip(b"=").decode()
    assert f"kokoro-gpu-0.1.0.dist-info/METADATA,sha256={digest},{len(metadata)}" in record
    assert "kokoro_gpu/__init__.py,sha256=old,6" in record


def test_a_wheel_without_the_engine_is_left_alone(backend: ModuleType, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "kokoro_gpu-0.1.0-py3-none-any.whl", with_engine=False)
    before = wheel.read_bytes()
    assert not backend.add_requirements_to_wheel(wheel, ["nvidia-cublas-cu12"])
    assert wheel.read_bytes() == before


@pytest.mark.parametrize(("major", "expected"), [
    (12, ["nvidia-cublas-cu12"]),
    (13, ["nvidia-cublas>=13,<14"]),
    (11, []),
])
def test_requirements_follow_nvcc(
    backend: ModuleType, monkeypatch: pytest.MonkeyPatch, major: int, expected: list[str]
) -> None:
    monkeypatch.delenv("KOKORO_NATIVE", raising=False)
    monkeypatch.setattr(backend, "_find_nvcc", lambda: Path("/opt/cuda/bin/nvcc"))
    monkeypatch.setattr(backend, "_toolkit_has_libraries", lambda nvcc: False)
    monkeypatch.setattr(backend, "_nvcc_major", lambda nvcc: major)
    assert backend.cuda_library_requirements() == expected
    # A full toolkit (the engine's RPATH points at its libraries) or a skipped engine needs none.
    assert backend.cuda_library_requirements({"cmake.define.KOKORO_NATIVE": "OFF"}) == []
    monkeypatch.setattr(backend, "_toolkit_has_libraries", lambda nvcc: True)
    assert backend.cuda_library_requirements() == []


def test_the_documented_extras_are_the_wheels_a_build_declares(backend: ModuleType) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["cuda12"] == list(backend._CUDA_WHEELS[12])
    assert extras["cuda13"] == list(backend._CUDA_WHEELS[13])


def test_prepared_metadata_declares_the_libraries(
    backend: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What pip resolves from: scikit-build-core's metadata for this project, plus the libraries."""
    wanted = ["nvidia-cublas>=13,<14"]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(backend, "cuda_library_requirements", lambda config_settings=None: wanted)
    name = backend.prepare_metadata_for_build_wheel(str(tmp_path), {"build-dir": str(tmp_path / "build")})
    head = (tmp_path / name / "METADATA").read_text(encoding="utf-8").split("\n\n", 1)[0]
    requires = [line.removeprefix("Requires-Dist: ") for line in head.splitlines() if "Requires-Dist" in line]
    assert requires[-1:] == wanted and "misaki==0.9.4" in requires
