"""The restricted .pth reader against torch-written fixtures (scripts/make_pth_fixture.py)."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu.errors import CheckpointError
from kokoro_gpu.pth import read_pth

TINY = Path(__file__).parent / "data" / "tiny"
MARKER = "kokoro_evil_marker"  # what evil.pth's payload would create


def flat(state: dict) -> dict[str, np.ndarray]:
    return {f"{top}.{key}": arr for top, sd in state.items() for key, arr in sd.items()}


def rewrite(src: Path, dst: Path, edit: Callable[[str, bytes], bytes | None]) -> Path:
    """Copy a zip archive entry by entry through ``edit`` (None drops the entry)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info.filename, data)
    return dst


def archive_with_pickle(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", b"little")
    return path


@pytest.mark.parametrize(("pth", "npz", "skip_prefix"), [
    ("tiny.pth", "tiny_expected.npz", "be."),
    ("tiny_param.pth", "tiny_param_expected.npz", None),
])
def test_matches_the_arrays_torch_was_given(pth: str, npz: str, skip_prefix: str | None) -> None:
    got = flat(read_pth(TINY / pth))
    with np.load(TINY / npz) as z:
        want = {k: z[k] for k in z.files if not (skip_prefix and k.startswith(skip_prefix))}
    assert sorted(got) == sorted(want)
    for k, arr in want.items():
        assert got[k].dtype == arr.dtype, k
        assert got[k].shape == arr.shape, k
        assert np.array_equal(got[k], arr), k
        assert got[k].flags.c_contiguous and got[k].flags.writeable, k


def test_dtypes_and_views_by_hand() -> None:
    te = read_pth(TINY / "tiny.pth")["text_encoder"]
    # The fixture's base storage is arange(20) * 0.25 - 1: element i is i / 4 - 1.
    np.testing.assert_array_equal(te["module.shared_offset"], [[-0.5, -0.25, 0.0], [0.25, 0.5, 0.75]])
    np.testing.assert_array_equal(te["module.shared_transposed"][0], [-1.0, 0.25, 1.5, 2.75])
    np.testing.assert_array_equal(te["module.shared_transposed"][:, 1], [0.25, 0.5, 0.75, 1.0, 1.25])
    state = read_pth(TINY / "tiny.pth")
    assert state["bert"]["module.encoder.half.weight"].dtype == np.float16
    assert state["bert_encoder"]["module.bias"].dtype == np.float32  # bfloat16 widened
    assert state["bert_encoder"]["module.weight"].shape == (3, 4)  # an nn.Parameter
    assert isinstance(state["predictor"], dict)


def test_big_endian_byteorder_record() -> None:
    got = read_pth(TINY / "tiny_be.pth")
    with np.load(TINY / "tiny_expected.npz") as z:
        for name in ("f32", "f16", "i64", "bf16"):
            want = z[f"be.{name}"]
            assert got[name].dtype == want.dtype.newbyteorder("=")
            assert got[name].dtype.isnative
            np.testing.assert_array_equal(got[name], want)


def test_bare_tensor_voice_pack() -> None:
    ramp = ((np.arange(510 * 256) % 1009) / 1009.0 - 0.5).astype(np.float32).reshape(510, 1, 256)
    got = read_pth(TINY / "voice.pt")
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, ramp)


def test_plain_python_values_pass_through(tmp_path: Path) -> None:
    value = {"a": [1, "x", 2.5, None, (True, -3)], "b": {}}
    assert read_pth(archive_with_pickle(tmp_path / "plain.pth", pickle.dumps(value, protocol=2))) == value


class _Permissive(pickle.Unpickler):
    """An unrestricted unpickler (torch globals stubbed): what the reader must not be."""

    def find_class(self, module: str, name: str) -> object:
        if module.startswith("torch"):
            return lambda *args: None
        return super().find_class(module, name)

    def persistent_load(self, pid: object) -> None:
        return None


def test_evil_fixture_refused_without_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=r"refusing.*system"):
        read_pth(TINY / "evil.pth")
    assert not (tmp_path / MARKER).exists()
    # The payload is live: an unrestricted unpickler does create the marker.
    with zipfile.ZipFile(TINY / "evil.pth") as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        _Permissive(io.BytesIO(z.read(pkl))).load()
    assert (tmp_path / MARKER).exists()


class _Call:
    def __init__(self, fn: Callable, *args: object) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple:
        return self.fn, self.args


@pytest.mark.parametrize(("payload", "refused"), [
    (_Call(eval, f"open('{MARKER}', 'w')"), "eval"),
    (_Call(exec, f"open('{MARKER}', 'w')"), "exec"),
    (_Call(os.system, f"touch {MARKER}"), "system"),
    (_Call(open, MARKER, "w"), "io.open"),
])
def test_crafted_globals_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 payload: _Call, refused: str) -> None:
    monkeypatch.chdir(tmp_path)
    path = archive_with_pickle(tmp_path / "bad.pth", pickle.dumps({"w": payload}, protocol=2))
    with pytest.raises(CheckpointError, match=refused):
        read_pth(path)
    assert not (tmp_path / MARKER).exists()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        read_pth(tmp_path / "nope.pth")


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "junk.pth"
    path.write_bytes(b"this is not a checkpoint at all" * 10)
    with pytest.raises(CheckpointError, match="not a readable torch zip"):
        read_pth(path)


def test_legacy_format_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pth"
    # Pickle protocol 2, then LONG1 with torch's legacy magic 0x1950a86a20f9469cfc6c.
    path.write_bytes(b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b".")
    with pytest.raises(CheckpointError, match="legacy"):
        read_pth(path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_truncated_file(tmp_path: Path, keep: float) -> None:
    data = (TINY / "tiny.pth").read_bytes()
    path = tmp_path / "cut.pth"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="truncated"):
        read_pth(path)


def test_short_storage(tmp_path: Path) -> None:
    def halve(name: str, data: bytes) -> bytes:
        return data[: len(data) // 2] if "/data/" in name else data

    with pytest.raises(CheckpointError, match=r"holds \d+ bytes but needs \d+"):
        read_pth(rewrite(TINY / "tiny.pth", tmp_path / "short.pth", halve))


def test_missing_storage(tmp_path: Path) -> None:
    def drop(name: str, data: bytes) -> bytes | None:
        return None if name.endswith("/data/0") else data

    with pytest.raises(CheckpointError, match=r"data/0 is missing"):
        read_pth(rewrite(TINY / "tiny.pth", tmp_path / "nostorage.pth", drop))


def test_truncated_pickle(tmp_path: Path) -> None:
    def cut(name: str, data: bytes) -> bytes:
        return data[: len(data) // 2] if name.endswith("data.pkl") else data

    with pytest.raises(CheckpointError, match="corrupt checkpoint pickle"):
        read_pth(rewrite(TINY / "tiny.pth", tmp_path / "cutpkl.pth", cut))


def test_zip_without_data_pkl(tmp_path: Path) -> None:
    def drop(name: str, data: bytes) -> bytes | None:
        return None if name.endswith("data.pkl") else data

    with pytest.raises(CheckpointError, match=r"not a torch\.save archive"):
        read_pth(rewrite(TINY / "tiny.pth", tmp_path / "nopkl.pth", drop))


def test_tensor_reaching_past_its_storage(tmp_path: Path) -> None:
    # In tiny_be.pth the float32 tensor has size (2, 3) over a 6-element storage:
    # BININT1 2, BININT1 3, TUPLE2. Patch the size to (7, 3).
    size_2x3 = b"K\x02K\x03\x86"

    def grow(name: str, data: bytes) -> bytes:
        if name.endswith("data.pkl"):
            assert data.count(size_2x3) == 1
            return data.replace(size_2x3, b"K\x07K\x03\x86")
        return data

    with pytest.raises(CheckpointError, match="reaches element 20 of a storage of 6"):
        read_pth(rewrite(TINY / "tiny_be.pth", tmp_path / "oob.pth", grow))


def test_bad_byteorder_record(tmp_path: Path) -> None:
    def edit(name: str, data: bytes) -> bytes:
        return b"middle" if name.endswith("/byteorder") else data

    with pytest.raises(CheckpointError, match="byteorder"):
        read_pth(rewrite(TINY / "tiny.pth", tmp_path / "bo.pth", edit))


# -- hostile archives: nothing outlives a load, every load bounded ---------------------------------

from fuzz_corpus import (  # noqa: E402
    pickle_doubling,
    pickle_global,
    pickle_str,
    pickle_tensor,
    torch_archive,
)

STORAGE = {"0": np.arange(12, dtype=np.float32).tobytes()}
GENUINE = b"}(" + pickle_str("w") + pickle_tensor("0", 12, 0, (3, 4), (4, 1)) + b"u"


def _write(tmp_path: Path, body: bytes, name: str = "hostile.pth") -> Path:
    path = tmp_path / name
    path.write_bytes(torch_archive(body, STORAGE))
    return path


def _one_line_error(path: Path, match: str, **kwargs: object) -> str:
    with pytest.raises(CheckpointError, match=match) as info:
        read_pth(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and len(message) <= 1000
    return message


def test_build_on_a_storage_type_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    # The attack: set attributes on the shared stand-in for torch.FloatStorage, so that
    # every later load reads float32 storages as something else.
    before = read_pth(TINY / "voice.pt")
    build = pickle_global("torch", "FloatStorage") + b"}" + pickle_str("name") + pickle_str("HalfStorage")
    _one_line_error(_write(tmp_path, build + b"sb0" + GENUINE), "sets the state of")
    np.testing.assert_array_equal(read_pth(TINY / "voice.pt"), before)
    assert read_pth(_write(tmp_path, GENUINE, "genuine.pth"))["w"].tolist() == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_stand_ins_are_fresh_per_load(tmp_path: Path) -> None:
    # A parameter rebuild can hand back a storage type itself; it must not escape the load.
    leak = pickle_global("torch._utils", "_rebuild_parameter") + b"(" + pickle_global("torch", "FloatStorage")
    _one_line_error(_write(tmp_path, b"}(" + pickle_str("t") + leak + b"tRu"), "never holds")


@pytest.mark.parametrize(("body", "match"), [
    (pickle_doubling(60), r"expands to more than \d+ values"),  # 2**60 leaves in a few hundred bytes
    (b"]" * 100_000 + b"a" * 99_999, "nests deeper than 64"),
    (b"N" + b"\x85" * 100_000, "nests deeper than 64"),
    (b"(" * 100_000, "nests deeper than 64"),
    (b"N" + b"\x94" * 200_000, "memoises more than"),
    (b"}" + pickle_doubling(40) + b"K\x01s", "as a dict key"),
    (b"\x8b\xff\xff\xff\x7f", "byte integer"),
])
def test_nesting_and_memo_are_bounded(tmp_path: Path, body: bytes, match: str) -> None:
    _one_line_error(_write(tmp_path, body), match)


@pytest.mark.parametrize(("size", "stride", "match"), [
    ((1 << 20, 1 << 20), (0, 0), "tensors declare"),  # stride 0: 4 TiB from 48 bytes
    ((10**9,), (1,), "reaches element"),
    ((2**100,), (1,), "malformed tensor record"),
])
def test_declared_tensor_sizes_are_bounded(tmp_path: Path, size: tuple, stride: tuple, match: str) -> None:
    body = b"}(" + pickle_str("w") + pickle_tensor("0", 12, 0, size, stride) + b"u"
    _one_line_error(_write(tmp_path, body), match)


def test_storage_bytes_are_bounded_before_reading(tmp_path: Path) -> None:
    bomb = torch_archive(GENUINE, {"0": np.zeros(16 << 20, np.float32).tobytes()})
    path = tmp_path / "bomb.pth"
    with zipfile.ZipFile(io.BytesIO(bomb)) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info), compress_type=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 1 << 20  # 64 MiB of zeros, deflated
    _one_line_error(path, "declares 67108864 bytes, more than the 1048576", max_bytes=1 << 20)
    assert read_pth(path)["w"].shape == (3, 4)  # within the default limit it loads


@pytest.mark.parametrize(("method", "flag", "match"), [
    (zipfile.ZIP_BZIP2, 0, "compression method 12"),
    (zipfile.ZIP_LZMA, 0, "compression method 14"),
    (zipfile.ZIP_STORED, 1, "is encrypted"),
])
def test_unsupported_zip_members_are_one_line_errors(tmp_path: Path, method: int, flag: int,
                                                     match: str) -> None:
    path = tmp_path / "odd.pth"
    with zipfile.ZipFile(TINY / "tiny.pth") as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info), compress_type=method)
    if flag:
        data = bytearray(path.read_bytes())
        for sig, off in ((b"PK\x01\x02", 8), (b"PK\x03\x04", 6)):
            pos = data.find(sig)
            while pos >= 0:
                data[pos + off] |= flag
                pos = data.find(sig, pos + 4)
        path.write_bytes(bytes(data))
    _one_line_error(path, match)


def test_duplicate_member_names_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.pth"
    with zipfile.ZipFile(TINY / "tiny_be.pth") as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zout.writestr("archive/data/0", b"\x00" * 24)
    _one_line_error(path, "two members of the same name")
