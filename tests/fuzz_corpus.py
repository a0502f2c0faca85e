"""The mutation corpus of tests/test_fuzz_loaders.py, made at test time from the tiny fixtures."""

from __future__ import annotations

import io
import json
import random
import struct
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

TINY = Path(__file__).parent / "data" / "tiny"
MARKER = "kokoro_fuzz_marker"

Case = dict[str, Any]


def _rewrite(data: bytes, edit: Callable[[zipfile.ZipInfo, bytes], list[tuple[str, bytes, int]]]) -> bytes:
    """A zip archive rebuilt member by member through ``edit`` -> [(name, bytes, compression)]."""
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(io.BytesIO(data)) as zin, \
            zipfile.ZipFile(out, "w") as zout:
        warnings.simplefilter("ignore")  # duplicate names are one of the edits
        for info in zin.infolist():
            for name, payload, method in edit(info, zin.read(info)):
                zout.writestr(zipfile.ZipInfo(name), payload, compress_type=method)
    return out.getvalue()


def _member_edit(data: bytes, match: Callable[[str], bool], new: Callable[[bytes], bytes]) -> bytes:
    return _rewrite(data, lambda info, payload: [(info.filename, new(payload) if match(info.filename)
                                                  else payload, zipfile.ZIP_STORED)])


def _patch_central(data: bytes, field: str, value: int) -> bytes:
    """Set a field of every central-directory and local header (flag bits or file size)."""
    buf = bytearray(data)
    offsets = {"flags": (8, 6, "<H"), "size": (24, 22, "<I")}
    central, local, fmt = offsets[field]
    for sig, off in ((b"PK\x01\x02", central), (b"PK\x03\x04", local)):
        pos = buf.find(sig)
        while pos >= 0:
            old = struct.unpack_from(fmt, buf, pos + off)[0]
            struct.pack_into(fmt, buf, pos + off, old | value if field == "flags" else value)
            pos = buf.find(sig, pos + 4)
    return bytes(buf)


def _byte_mutations(data: bytes, rng: random.Random, flips: int, region: tuple[int, int] | None = None
                    ) -> Iterator[tuple[str, bytes]]:
    n = len(data)
    for keep in (0, 1, 10, 100, n // 10, n // 3, n // 2, 2 * n // 3, 9 * n // 10, n - 100, n - 22, n - 1):
        if 0 <= keep < n:
            yield f"truncate:{keep}", data[:keep]
    lo, hi = region or (0, n)
    for _ in range(flips):
        pos = rng.randrange(lo, hi)
        buf = bytearray(data)
        buf[pos] ^= 1 << rng.randrange(8)
        yield f"bitflip:{pos}", bytes(buf)
    for _ in range(max(2, flips // 8)):
        pos = rng.randrange(lo, max(lo + 1, hi - 8))
        yield f"ff-run:{pos}", data[:pos] + b"\xff" * 8 + data[pos + 8:]
    yield "appended-junk", data + b"\x00junk" * 100


def _zip_mutations(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    for name in rng.sample(names, min(6, len(names))):
        yield f"drop:{name}", _rewrite(data, lambda i, p, n=name: [] if i.filename == n else
                                       [(i.filename, p, zipfile.ZIP_STORED)])
    yield "deflated", _rewrite(data, lambda i, p: [(i.filename, p, zipfile.ZIP_DEFLATED)])
    yield "bzip2", _rewrite(data, lambda i, p: [(i.filename, p, zipfile.ZIP_BZIP2)])
    yield "lzma", _rewrite(data, lambda i, p: [(i.filename, p, zipfile.ZIP_LZMA)])
    yield "encrypted-flag", _patch_central(data, "flags", 0x1)
    yield "declared-size-2GiB", _patch_central(data, "size", 0x7FFFFFFF)
    yield "duplicated-members", _rewrite(data, lambda i, p: [(i.filename, p, 0), (i.filename, p[::-1], 0)])
    yield "renamed-prefix", _rewrite(data, lambda i, p: [("other/" + i.filename.split("/", 1)[-1], p, 0)])
    yield "second-data-pkl", _rewrite(data, lambda i, p: [(i.filename, p, 0)] + (
        [("second/data.pkl", p, 0)] if i.filename.endswith("data.pkl") else []))
    big = b"\x00" * (64 << 20)
    yield "bomb-64MiB-storage", _rewrite(data, lambda i, p: [(i.filename, big if "/data/" in i.filename
                                                               and not i.filename.endswith(".pkl") else p,
                                                               zipfile.ZIP_DEFLATED)])


def _values(dtype: np.dtype) -> Iterator[tuple[str, Callable[[bytes], bytes]]]:
    """Storage edits that put non-finite or absurd values into float data."""
    for label, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf), ("1e30", 1e30)):
        def put(raw: bytes, value: float = value) -> bytes:
            arr = np.frombuffer(raw, dtype=dtype).copy()
            if arr.size:
                arr[arr.size // 2] = value
            return arr.tobytes()
        yield label, put


# Hand-written protocol-2 pickles of torch checkpoints (no torch needed).
def _g(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _u(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _i(n: int) -> bytes:
    if 0 <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _tup(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _tensor(key: str, numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
            stype: str = "FloatStorage") -> bytes:
    pid = _tup(_u("storage"), _g("torch", stype), _u(key), _u("cpu"), _i(numel)) + b"Q"
    args = _tup(pid, _i(offset), _tup(*map(_i, size)), _tup(*map(_i, stride)), b"\x89",
                _g("collections", "OrderedDict") + b")R")
    return _g("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def _hand_archive(pickle_body: bytes, storages: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("hand/data.pkl", b"\x80\x02" + pickle_body + b".")
        z.writestr("hand/byteorder", b"little")
        for key, raw in storages.items():
            z.writestr(f"hand/data/{key}", raw)
    return out.getvalue()


HAND_STORAGE = {"0": np.arange(12, dtype=np.float32).tobytes()}
HAND_GENUINE = b"}(" + _u("w") + _tensor("0", 12, 0, (3, 4), (4, 1)) + b"u"


def _entry(value: bytes) -> bytes:
    """The genuine dict plus one more entry ``x`` holding ``value``."""
    return b"}(" + _u("w") + _tensor("0", 12, 0, (3, 4), (4, 1)) + _u("x") + value + b"u"


def _doubling(levels: int) -> bytes:
    """[] then (x, x) nested ``levels`` deep through the memo: tiny pickle, 2**levels leaves."""
    body = b"]q\x00"
    for level in range(levels):
        body += b"h" + bytes([level]) + b"h" + bytes([level]) + b"\x86q" + bytes([level + 1])
    return body


def _payload(call: bytes) -> bytes:
    return call + b"0"  # evaluated, then popped: the genuine value stays


def _pickle_cases(marker: Path) -> Iterator[tuple[str, bytes]]:
    m = str(marker)
    genuine_tail = HAND_GENUINE
    for label, call in (
        ("os.system", _g("os", "system") + _tup(_u(f"touch {m}")) + b"R"),
        ("posix.system", _g("posix", "system") + _tup(_u(f"touch {m}")) + b"R"),
        ("builtins.eval", _g("builtins", "eval") + _tup(_u(f"open({m!r}, 'w')")) + b"R"),
        ("builtins.exec", _g("builtins", "exec") + _tup(_u(f"open({m!r}, 'w')")) + b"R"),
        ("io.open", _g("io", "open") + _tup(_u(m), _u("w")) + b"R"),
        ("subprocess.Popen", _g("subprocess", "Popen") + _tup(_tup(_u("touch"), _u(m))) + b"R"),
        ("stack-global-system", _u("os") + _u("system") + b"\x93" + _tup(_u(f"touch {m}")) + b"R"),
        ("build-storage-type", _g("torch", "FloatStorage") + b"}" + _u("name") + _u("HalfStorage") + b"sb"),
        ("build-slotstate", _g("torch", "FloatStorage") + _tup(b"N", b"}" + _u("bfloat16") + b"\x88s")
         + b"b"),
        ("build-rebuild-fn", _g("torch._utils", "_rebuild_tensor_v2") + _tup(
            b"N", b"}" + _u("__defaults__") + _tup(_i(1)) + b"s") + b"b"),
        ("build-ordereddict-class", _g("collections", "OrderedDict") + b"}" + _u("x") + _i(1) + b"sb"),
        ("reduce-ordereddict-args", _g("collections", "OrderedDict") + _tup(b"]") + b"R"),
        ("reduce-storage-type", _g("torch", "FloatStorage") + b")R"),
        ("reduce-on-tensor", _tensor("0", 12, 0, (12,), (1,)) + b")R"),
        ("setitem-on-global", _g("torch._utils", "_rebuild_parameter") + _u("k") + _i(1) + b"s"),
        ("append-on-global", _g("torch", "FloatStorage") + _i(1) + b"a"),
        ("persid-text", b"Pstorage\n"),
        ("binpersid-not-tuple", _u("storage") + b"Q"),
        ("binpersid-path", _tup(_u("storage"), _g("torch", "FloatStorage"), _u("../data.pkl"), _u("cpu"),
                                _i(4)) + b"Q"),
        ("binpersid-huge-numel", _tup(_u("storage"), _g("torch", "FloatStorage"), _u("0"), _u("cpu"),
                                      _i(2**40)) + b"Q"),
    ):
        yield f"pickle:{label}", _payload(call) + genuine_tail
    for label, value in (
        ("stride0-huge", _tensor("0", 12, 0, (1 << 20, 1 << 20), (0, 0))),
        ("stride0-1e8", _tensor("0", 12, 0, (10**8,), (0,))),
        ("size-past-storage", _tensor("0", 12, 0, (10**9,), (1,))),
        ("offset-past-storage", _tensor("0", 12, 2**40, (1,), (1,))),
        ("negative-size", _tensor("0", 12, 0, (-1, 4), (4, 1))),
        ("negative-stride", _tensor("0", 12, 11, (12,), (-1,))),
        ("huge-int-size", _tensor("0", 12, 0, (2**100,), (1,))),
        ("17-dims", _tensor("0", 12, 0, (1,) * 17, (1,) * 17)),
        ("bf16-stride0", _tensor("0", 24, 0, (1 << 30,), (0,), "BFloat16Storage")),
        ("doubling-60", _doubling(60)),
        ("doubling-24", _doubling(24)),
        ("deep-list-100k", b"]" * 100_000 + b"a" * 99_999),
        ("deep-tuple1-100k", b"N" + b"\x85" * 100_000),
        ("deep-marks-100k", b"(" * 100_000),
        ("cycle", b"]q\x00h\x00a"),
        ("tuple-key-doubling", b"}" + _doubling(40) + _i(1) + b"s"),
        ("list-key", b"}]" + _i(1) + b"s"),
        ("memo-2M", b"N" + b"\x94" * 2_100_000),
        ("memo-index-4G", b"Nr\xff\xff\xff\xff"),
        ("memo-get-missing", b"j\xff\xff\xff\x7f"),
        ("long4-huge", b"\x8b\xff\xff\xff\x7f"),
        ("long4-negative", b"\x8b\xff\xff\xff\xff"),
        ("unicode-len-2G", b"X\xff\xff\xff\x7f"),
        ("frame-huge", b"\x95" + struct.pack("<Q", 2**62)),
        ("text-int", b"I1" * 1 + b"9" * 5000 + b"\n"),
        ("set-opcodes", b"\x8f(" + _i(1) + b"\x90"),
        ("inst-opcode", b"(ios\nsystem\n"),
        ("ext1", b"\x82\x01"),
    ):
        yield f"entry:{label}", _entry(value)


def _pickle_edits(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Edits of a torch-written data.pkl: opcodes swapped for others at each GLOBAL / REDUCE / BUILD."""
    is_pkl = lambda name: name.endswith("data.pkl")  # noqa: E731
    pkl = next(zipfile.ZipFile(io.BytesIO(data)).read(n) for n in zipfile.ZipFile(io.BytesIO(data)).namelist()
               if is_pkl(n))
    for opcode, label in ((b"R", "REDUCE"), (b"b", "BUILD"), (b"Q", "BINPERSID"), (b"c", "GLOBAL"),
                          (b"u", "SETITEMS"), (b"t", "TUPLE")):
        first = pkl.find(opcode, 2)
        for other in (b"R", b"b", b"Q", b"0", b"2", b"."):
            if first > 0 and other != opcode:
                new = pkl[:first] + other + pkl[first + 1:]
                yield f"opcode:{label}->{other.decode()}", _member_edit(data, is_pkl, lambda _p, n=new: n)
    yield "pickle-doubled", _member_edit(data, is_pkl, lambda p: p[:-1] + p[2:])
    yield "pickle-reversed", _member_edit(data, is_pkl, lambda p: p[::-1])


def _is_storage(name: str) -> bool:
    return name.split("/")[-2:-1] == ["data"]


def _storage_value_edits(data: bytes, little_endian_f4: bool) -> Iterator[tuple[str, bytes]]:
    """NaN (all-ones bytes: NaN in every float format) in every storage; inf / 1e30 in a float32 one."""
    def all_ones(raw: bytes) -> bytes:
        mid = len(raw) // 2 // 8 * 8
        return raw[:mid] + b"\xff" * min(8, len(raw) - mid) + raw[mid + 8:]

    yield "values:nan-bytes", _member_edit(data, _is_storage, all_ones)
    if little_endian_f4:
        for label, put in _values(np.dtype("<f4")):
            yield f"values:{label}", _member_edit(data, lambda n: _is_storage(n) and n.endswith("/0"), put)


def _safetensors_edits(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    yield from _byte_mutations(data, rng, 30, region=(0, 8 + n))

    def with_header(h: dict) -> bytes:
        raw = json.dumps(h).encode()
        return struct.pack("<Q", len(raw)) + raw + data[8 + n:]

    first = next(k for k in header if k != "__metadata__")
    for label, field, value in (("dtype-F64", "dtype", "F64"), ("dtype-XX", "dtype", "XX"),
                                ("shape-huge", "shape", [2**40, 2**40]), ("shape-neg", "shape", [-1]),
                                ("offsets-past", "data_offsets", [0, 2**40]),
                                ("offsets-backward", "data_offsets", [8, 0])):
        yield f"header:{label}", with_header({**header, first: {**header[first], field: value}})
    yield "header-len-huge", struct.pack("<Q", 2**62) + data[8:]
    yield "header-not-json", struct.pack("<Q", n) + b"{" * n + data[8 + n:]
    yield "header-deep-json", with_header({"x": json.loads("[" * 50 + "]" * 50)})
    body = bytearray(data)
    for label, value in (("nan", np.nan), ("inf", np.inf), ("1e30", 1e30)):
        start = 8 + n + header[first]["data_offsets"][0]
        edited = bytearray(body)
        edited[start:start + 4] = np.float32(value).tobytes()
        yield f"values:{label}", bytes(edited)


def _npy_edits(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    header_len = struct.unpack("<H", data[8:10])[0]
    end = 10 + header_len
    yield from _byte_mutations(data, rng, 20, region=(0, end))
    header = data[10:end].decode("latin1")
    for label, old, new in (("shape-huge", "(510, 1, 256)", "(1000000, 1000000, 256)"),
                            ("dtype-object", "'<f4'", "'|O'"), ("dtype-f8", "'<f4'", "'<f8'"),
                            ("dtype-big-endian", "'<f4'", "'>f4'"),
                            ("shape-2d", "(510, 1, 256)", "(510, 256)")):
        text = header.replace(old, new)
        text = text.rstrip() + " " * (header_len - len(text.rstrip()) - 1) + "\n"
        if len(text) == header_len:
            yield f"npy:{label}", data[:10] + text.encode("latin1") + data[end:]
    for label, value in (("nan", np.nan), ("inf", np.inf), ("1e30", 1e30)):
        edited = bytearray(data)
        edited[end + 400:end + 404] = np.float32(value).tobytes()
        yield f"values:{label}", bytes(edited)


def _config_edits(text: str) -> Iterator[tuple[str, bytes]]:
    config = json.loads(text)
    bad_ints = (0, -1, 10**9, "x", 1.5, None, True, [], {})
    for key, value in config.items():
        if isinstance(value, int) and not isinstance(value, bool):
            for bad in bad_ints:
                yield f"{key}={bad!r}", json.dumps({**config, key: bad}).encode()
        if key not in ("dropout",):
            yield f"drop:{key}", json.dumps({k: v for k, v in config.items() if k != key}).encode()
    for bad in ("x", -1, 2, None):
        yield f"dropout={bad!r}", json.dumps({**config, "dropout": bad}).encode()
    for bad in ("x", 1, None):
        yield f"multispeaker={bad!r}", json.dumps({**config, "multispeaker": bad}).encode()
    for section in ("plbert", "istftnet"):
        yield f"{section}={{}}", json.dumps({**config, section: {}}).encode()
        yield f"{section}=[]", json.dumps({**config, section: []}).encode()
        for key, value in config[section].items():
            valid_zero = key == "dropout"  # 0 is a valid dropout: not a corruption
            for bad in ((-1, "x", [], None, 10**9) + (() if valid_zero else (0,))
                        + (([0], [[0]], [1] * 100) if isinstance(value, list) else ())):
                yield (f"{section}.{key}={bad!r}"[:80],
                       json.dumps({**config, section: {**config[section], key: bad}}).encode())
    first = next(iter(config["vocab"]))
    for bad in (-1, 10**6, "a", None):
        vocab = {**config["vocab"], first: bad}
        yield f"vocab.{first}={bad!r}", json.dumps({**config, "vocab": vocab}).encode()
    yield "vocab-huge", json.dumps({**config, "vocab": {str(i): 1 for i in range(70000)}}).encode()
    yield "top-level-list", b"[1, 2]"
    yield "deep-json", b"[" * 100_000 + b"]" * 100_000
    yield "not-utf8", b"\xff\xfe" + text.encode()[2:]
    yield "nan-literal", text.replace('"dropout": 0.2', '"dropout": NaN').encode()
    yield "huge-file", text.encode() + b" " * (2 << 20)
    raw = text.encode()
    for keep in (0, 1, len(raw) // 2, len(raw) - 1):
        yield f"truncate:{keep}", raw[:keep]


def build_corpus(root: Path) -> tuple[list[Case], dict[str, str]]:
    """Write every case under ``root``; return the cases and the genuine file of each base."""
    from safetensors.numpy import save_file

    from kokoro_gpu.config import DEFAULT_CONFIG_PATH

    rng = random.Random(43)
    genuine_dir = root / "genuine"
    genuine_dir.mkdir()
    files: dict[str, Path] = {}
    for name in ("tiny.pth", "tiny_param.pth", "tiny_be.pth"):
        files[f"pth:{name}"] = TINY / name
    (genuine_dir / "hand.pth").write_bytes(_hand_archive(HAND_GENUINE, HAND_STORAGE))
    files["pth:hand.pth"] = genuine_dir / "hand.pth"
    with np.load(TINY / "tiny_expected.npz") as z:
        arrays = {k: z[k] for k in z.files if z[k].dtype == np.float32}
    save_file(arrays, genuine_dir / "tiny.safetensors")
    files["safetensors:tiny.safetensors"] = genuine_dir / "tiny.safetensors"
    files["voice:voice.pt"] = TINY / "voice.pt"
    from kokoro_gpu.pth import read_pth

    pack = read_pth(TINY / "voice.pt")
    np.save(genuine_dir / "af_npy.npy", pack)
    files["voice:af_npy.npy"] = genuine_dir / "af_npy.npy"
    save_file({"voice": pack}, genuine_dir / "af_st.safetensors")
    files["voice:af_st.safetensors"] = genuine_dir / "af_st.safetensors"
    bin_dir = genuine_dir / "bin"
    bin_dir.mkdir()
    with open(bin_dir / "voices-v1.0.bin", "wb") as f:
        np.savez(f, af_one=pack, bf_two=pack[::-1].copy())
    files["bin:voices-v1.0.bin"] = bin_dir / "voices-v1.0.bin"
    files["config:config.json"] = DEFAULT_CONFIG_PATH

    def mutations(base: str, data: bytes) -> Iterator[tuple[str, bytes]]:
        kind, name = base.split(":", 1)
        if kind in ("pth", "bin") or name.endswith(".pt"):
            yield from _byte_mutations(data, rng, 40)
            yield from _zip_mutations(data, rng)
            if kind == "bin":
                yield from _storage_value_edits_npz(data)
            else:
                yield from _pickle_edits(data)
                yield from _storage_value_edits(data, little_endian_f4=name != "tiny_be.pth")
        if name == "hand.pth":
            for label, body in _pickle_cases(root / MARKER):
                yield label, _hand_archive(body, HAND_STORAGE)
        if name.endswith(".safetensors"):
            yield from _safetensors_edits(data, rng)
        if name.endswith(".npy"):
            yield from _npy_edits(data, rng)
        if kind == "config":
            yield from _config_edits(data.decode())

    cases: list[Case] = []
    for base, path in files.items():
        for i, (label, blob) in enumerate(mutations(base, path.read_bytes())):
            case_dir = root / "cases" / f"{base.replace(':', '_')}_{i}"
            case_dir.mkdir(parents=True)
            target = case_dir / path.name
            target.write_bytes(blob)
            cases.append({"kind": base.split(":")[0], "base": base, "path": str(target), "label": label})
    return cases, {base: str(path) for base, path in files.items()}


def _storage_value_edits_npz(data: bytes) -> Iterator[tuple[str, bytes]]:
    for label, value in (("nan", np.nan), ("inf", np.inf), ("1e30", 1e30)):
        def put(raw: bytes, value: float = value) -> bytes:
            edited = bytearray(raw)
            edited[-8:-4] = np.float32(value).tobytes()
            return bytes(edited)
        yield f"values:{label}", _member_edit(data, lambda n: n == "af_one.npy", put)
    for label, old, new in (("shape-huge", b"(510, 1, 256)", b"(510000, 1, 256)"),
                            ("dtype-object", b"'<f4'", b"'|O'")):
        yield f"npy:{label}", _member_edit(data, lambda n: n == "bf_two.npy",
                                           lambda p, o=old, w=new: p.replace(o, w))


# For tests elsewhere: hand-written torch-style archives.
pickle_str, pickle_global, pickle_tensor, pickle_doubling = _u, _g, _tensor, _doubling
torch_archive = _hand_archive
