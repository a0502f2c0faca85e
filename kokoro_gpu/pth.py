"""A restricted, bounded reader of PyTorch ``.pth`` files that never runs code from the file.

A ``torch.save`` file is a zip archive: ``<prefix>/data.pkl`` is a pickle whose
tensors refer to raw storages ``<prefix>/data/<key>`` through persistent ids.
Unpickling it with :mod:`pickle` as-is would let the file call any importable
function, so this reader resolves only the handful of globals a tensor
checkpoint needs, each to a NumPy stand-in made afresh for every load, and
refuses everything else. Tensors come back as NumPy arrays (bfloat16, which
NumPy lacks, as float32).

Nothing a file does outlives its load, and a load costs time and memory in
proportion to the tensor data the file really holds:

- the pickle runs on the pure-Python unpickler with its own opcode table: only
  the opcodes ``torch.save`` writes, BUILD only on the dicts the load itself
  made (its state, torch's ``_metadata``, is dropped), REDUCE only of the
  stand-ins, dict keys only plain scalars (hashing a nested key could take
  exponential time), and limits on the memo, the mark nesting and long integers;
- zip members are read only when stored or deflated and unencrypted, each
  within the bytes the caller allows in all (``max_bytes``);
- a tensor's size and strides must lie inside its storage, and all tensors
  together may hold at most a few times the bytes of the storages read (a
  stride-0 tensor cannot expand a few bytes into gigabytes);
- the result is walked once, without recursion, with a depth limit and a node
  budget, so no later walk of it can recurse too deep or blow up on shared
  references; only dicts, lists, tuples, arrays and plain scalars pass.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError

# Leading bytes of a pre-1.6 (non-zip) torch file: pickle protocol 2, then a LONG1
# opcode carrying torch's legacy magic number.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"

# torch storage class name -> element dtype as stored (little endian unless the
# archive's byteorder record says otherwise). bfloat16 is read as raw uint16.
_STORAGE_DTYPES = {
    "FloatStorage": "f4",
    "DoubleStorage": "f8",
    "HalfStorage": "f2",
    "BFloat16Storage": "u2",
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}

# Limits. The official checkpoint's pickle is about 60 KB with a few thousand
# memo entries and nesting depth 3; these leave orders of magnitude of room.
DEFAULT_MAX_BYTES = 2 << 30  # storage bytes one load may read, unless the caller says less
MAX_PICKLE_BYTES = 64 << 20
MAX_MEMO = 1 << 17
MAX_MARK_DEPTH = 64
MAX_DEPTH = 64  # of the loaded structure
MAX_NODES = 2_000_000  # values visited in the loaded structure, shared ones once per reference
MAX_KEY_CHARS = 64 << 20  # dict-key characters visited likewise
MAX_LONG_BYTES = 64
MAX_NDIM = 16
MAX_DIM = 1 << 40
# All tensors of a load may hold this many times the storage bytes read, plus a MiB.
TENSOR_BYTES_PER_STORAGE_BYTE = 4
_TENSOR_BYTES_ALLOWANCE = 1 << 20

_SUPPORTED_COMPRESSION = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_SCALAR_KEYS = (str, int, float, bool, bytes, type(None))
_LEAVES = (str, bytes, int, float, bool, type(None), np.ndarray)

# The opcodes of pickle protocols 2 - 5 that a torch.save pickle can contain.
_ALLOWED_OPCODES = (
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "NONE", "NEWTRUE", "NEWFALSE", "BINFLOAT",
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "LIST",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD",
    "BINPERSID", "PERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "MEMOIZE",
)


class _Corrupt(Exception):
    """A structural problem in the archive; read_pth reports it with the file name."""


class _TooLarge(Exception):
    """The file asks for more than the load's limits; read_pth reports it with the file name."""


class _Refused(Exception):
    """The pickle references a global outside the allow-list."""


def _describe(x: Any) -> str:
    """A short, safe description of an untrusted value (never its full repr)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 1 << 64:
        return repr(x)
    if isinstance(x, tuple) and len(x) <= MAX_NDIM and all(type(v) is int and abs(v) < 1 << 64 for v in x):
        return repr(x)
    if isinstance(x, str) and len(x) <= 40:
        return repr(x)
    return f"a {type(x).__name__}"


def _is_index(x: Any, limit: int = MAX_DIM) -> bool:
    return type(x) is int and 0 <= x <= limit


class _StorageType:
    """What ``torch.XStorage`` resolves to: its element type, immutable."""

    __slots__ = ("bfloat16", "name")

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "bfloat16", name == "BFloat16Storage")

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("storage types are immutable")


class _Storage:
    """One raw storage, decoded to a 1-D native-endian read-only array."""

    __slots__ = ("bfloat16", "data")

    def __init__(self, data: np.ndarray, bfloat16: bool) -> None:
        self.data = data
        self.bfloat16 = bfloat16


class _OpcodeTable(dict):
    def __missing__(self, key: int) -> Callable[[Any], None]:
        raise _Corrupt(f"the pickle uses opcode 0x{key:02x}, which torch.save never writes")


class _Reader(pickle._Unpickler):  # the pure-Python unpickler: its opcode table can be replaced
    """One load of one archive: every stand-in and cache here lives exactly as long as the load."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, byteorder: str,
                 max_bytes: int) -> None:
        super().__init__(io.BytesIO(data))
        self._archive = archive
        self._prefix = prefix
        self._byteorder = byteorder
        self._bytes_left = max_bytes
        self._bytes_read = 0
        self._tensor_bytes = 0
        self._storages: dict[tuple[str, str], _Storage] = {}
        # Fresh stand-ins for this load (bound methods and new objects): a file can
        # never reach an object that another load will use.
        self._callables = (self._rebuild_tensor_v2, self._rebuild_parameter, self._ordered_dict)
        self._globals: dict[tuple[str, str], Any] = {
            ("torch._utils", "_rebuild_tensor_v2"): self._callables[0],
            ("torch._utils", "_rebuild_parameter"): self._callables[1],
            ("collections", "OrderedDict"): self._callables[2],
            **{("torch", name): _StorageType(name) for name in _STORAGE_DTYPES},
        }
        self.dispatch = _OpcodeTable(
            {getattr(pickle, name)[0]: pickle._Unpickler.dispatch[getattr(pickle, name)[0]]
             for name in _ALLOWED_OPCODES})
        for name, method in (("BUILD", _Reader._build), ("REDUCE", _Reader._reduce),
                             ("SETITEM", _Reader._setitem), ("SETITEMS", _Reader._setitems),
                             ("DICT", _Reader._dict), ("APPEND", _Reader._append),
                             ("APPENDS", _Reader._appends), ("MARK", _Reader._mark),
                             ("LONG4", _Reader._long4), ("BINPUT", _Reader._binput),
                             ("LONG_BINPUT", _Reader._long_binput), ("MEMOIZE", _Reader._memoize)):
            self.dispatch[getattr(pickle, name)[0]] = method

    # -- globals and persistent ids ------------------------------------------------

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._globals[(module, name)]
        except KeyError:
            raise _Refused(
                f"refusing to load: the pickle references the global {module[:80]}.{name[:80]}, "
                "which a checkpoint of plain tensors never needs; only load files from sources you trust"
            ) from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and type(pid[2]) is str and _is_index(pid[4])):
            raise _Corrupt(f"unexpected persistent id ({_describe(pid)}) in the pickle")
        stype, key, numel = pid[1], pid[2], pid[4]
        cached = self._storages.get((key, stype.name))
        if cached is not None:
            return cached
        entry = f"{self._prefix}/data/{key}"
        order = "<" if self._byteorder == "little" else ">"
        dtype = np.dtype(_STORAGE_DTYPES[stype.name]).newbyteorder(order)
        raw = self._member(entry)
        if len(raw) < numel * dtype.itemsize:
            raise _Corrupt(f"storage {entry[:80]} holds {len(raw)} bytes but needs {numel * dtype.itemsize}")
        data = np.frombuffer(raw, dtype=dtype, count=numel)
        if not dtype.isnative:
            data = data.astype(dtype.newbyteorder("="))
        data.flags.writeable = False
        storage = _Storage(data, stype.bfloat16)
        self._storages[(key, stype.name)] = storage
        return storage

    def _member(self, name: str) -> bytes:
        try:
            info = self._archive.getinfo(name)
        except KeyError:
            raise _Corrupt(f"storage {name[:80]} is missing from the archive") from None
        if info.file_size > self._bytes_left:
            raise _TooLarge(f"storage {name[:80]} declares {info.file_size} bytes, more than the "
                            f"{self._bytes_left} this load may still read")
        data = read_member(self._archive, info)
        self._bytes_left -= len(data)
        self._bytes_read += len(data)
        return data

    # -- stand-ins -------------------------------------------------------------------

    def _rebuild_tensor_v2(self, storage: Any, storage_offset: Any, size: Any, stride: Any,
                           *_rest: Any) -> np.ndarray:
        """Stand-in for ``torch._utils._rebuild_tensor_v2``: a view into the storage, copied."""
        if not isinstance(storage, _Storage):
            raise _Corrupt("malformed tensor record in the pickle (its storage is not a storage)")
        if not (type(size) is tuple and type(stride) is tuple and len(size) == len(stride) <= MAX_NDIM
                and all(map(_is_index, size)) and all(map(_is_index, stride))
                and _is_index(storage_offset)):
            raise _Corrupt(f"malformed tensor record in the pickle (size {_describe(size)}, "
                           f"stride {_describe(stride)}, offset {_describe(storage_offset)})")
        data = storage.data
        numel = math.prod(size)
        if numel:
            last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
            if last >= data.size:
                raise _Corrupt(f"a tensor of shape {size} reaches element {last} of a storage of "
                               f"{data.size} elements")
        self._tensor_bytes += numel * (4 if storage.bfloat16 else data.itemsize)
        allowed = TENSOR_BYTES_PER_STORAGE_BYTE * self._bytes_read + _TENSOR_BYTES_ALLOWANCE
        if self._tensor_bytes > allowed:
            raise _TooLarge(f"its tensors declare {self._tensor_bytes} bytes, far more than the "
                            f"{self._bytes_read} bytes of storage the file holds")
        if numel:
            item = data.itemsize
            view = np.lib.stride_tricks.as_strided(data[storage_offset:], shape=size,
                                                   strides=tuple(s * item for s in stride), writeable=False)
            out = np.array(view, order="C")
        else:
            out = np.zeros(size, dtype=data.dtype)
        if storage.bfloat16:
            # bfloat16 is the top half of a float32: widen the bit pattern.
            out = (out.astype(np.uint32) << 16).view(np.float32)
        return out

    def _rebuild_parameter(self, data: Any, *_rest: Any) -> Any:
        """Stand-in for ``torch._utils._rebuild_parameter``: a Parameter is just its data here."""
        return data

    def _ordered_dict(self, *args: Any) -> collections.OrderedDict:
        """Stand-in for ``collections.OrderedDict``: only the empty one torch's pickles build."""
        if args:
            raise _Corrupt("the pickle builds an OrderedDict from arguments, which torch.save never does")
        return collections.OrderedDict()

    # -- opcodes -----------------------------------------------------------------

    def _build(self) -> None:
        state = self.stack.pop()
        target = self.stack[-1]
        if type(target) not in (dict, collections.OrderedDict):
            raise _Corrupt(f"the pickle sets the state of {_describe(target)}; only the state dicts "
                           "torch.save writes may carry state")
        del state  # torch's state-dict metadata: not needed, and never set on anything

    def _reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if not any(func is c for c in self._callables) or type(args) is not tuple:
            raise _Corrupt(f"the pickle calls {_describe(func)}, which is not a tensor rebuild")
        self.stack[-1] = func(*args)

    def _check_key(self, key: Any) -> None:
        if not isinstance(key, _SCALAR_KEYS):
            raise _Corrupt(f"the pickle uses {_describe(key)} as a dict key; a checkpoint's keys are names")

    def _dict_target(self) -> dict:
        target = self.stack[-1]
        if type(target) not in (dict, collections.OrderedDict):
            raise _Corrupt(f"the pickle sets items on {_describe(target)}, not on a dict")
        return target

    def _setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._check_key(key)
        self._dict_target()[key] = value

    def _setitems(self) -> None:
        items = self.pop_mark()
        target = self._dict_target()
        for i in range(0, len(items) - 1, 2):
            self._check_key(items[i])
            target[items[i]] = items[i + 1]

    def _dict(self) -> None:
        items = self.pop_mark()
        for i in range(0, len(items) - 1, 2):
            self._check_key(items[i])
        self.append({items[i]: items[i + 1] for i in range(0, len(items) - 1, 2)})

    def _list_target(self) -> list:
        target = self.stack[-1]
        if type(target) is not list:
            raise _Corrupt(f"the pickle appends to {_describe(target)}, not to a list")
        return target

    def _append(self) -> None:
        value = self.stack.pop()
        self._list_target().append(value)

    def _appends(self) -> None:
        items = self.pop_mark()
        self._list_target().extend(items)

    def _mark(self) -> None:
        if len(self.metastack) >= MAX_MARK_DEPTH:
            raise _TooLarge(f"its pickle nests deeper than {MAX_MARK_DEPTH} levels")
        pickle._Unpickler.dispatch[pickle.MARK[0]](self)

    def _long4(self) -> None:
        (n,) = struct.unpack("<i", self.read(4))
        if not 0 <= n <= MAX_LONG_BYTES:
            raise _Corrupt(f"the pickle holds a {n}-byte integer")
        self.append(int.from_bytes(self.read(n), "little", signed=True))

    def _check_memo(self) -> None:
        if len(self.memo) > MAX_MEMO:
            raise _TooLarge(f"its pickle memoises more than {MAX_MEMO} values")

    def _binput(self) -> None:
        pickle._Unpickler.dispatch[pickle.BINPUT[0]](self)
        self._check_memo()

    def _long_binput(self) -> None:
        pickle._Unpickler.dispatch[pickle.LONG_BINPUT[0]](self)
        self._check_memo()

    def _memoize(self) -> None:
        pickle._Unpickler.dispatch[pickle.MEMOIZE[0]](self)
        self._check_memo()


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A zip member's bytes: stored or deflated, unencrypted, and never more than it declares.

    Every problem is a :class:`zipfile.BadZipFile` (zlib's errors aside).
    """
    if info.flag_bits & 0x1:
        raise zipfile.BadZipFile(f"member {info.filename[:80]} is encrypted")
    if info.compress_type not in _SUPPORTED_COMPRESSION:
        raise zipfile.BadZipFile(f"member {info.filename[:80]} uses zip compression method "
                                 f"{info.compress_type}; only stored and deflated members are supported")
    with archive.open(info) as f:
        # ZipExtFile stops at the declared size, so this reads at most file_size bytes.
        data = f.read(info.file_size)
        if f.read(1):
            raise zipfile.BadZipFile(f"member {info.filename[:80]} is longer than it declares")
    if len(data) != info.file_size:
        raise zipfile.BadZipFile(f"member {info.filename[:80]} is shorter than it declares")
    return data


def _record_prefix(archive: zipfile.ZipFile, path: Path) -> str:
    prefixes = [n[: -len("/data.pkl")] for n in archive.namelist()
                if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(prefixes) != 1:
        raise CheckpointError(f"{path}: not a torch.save archive (expected one <name>/data.pkl, "
                              f"found {len(prefixes)}); pass a checkpoint written by torch.save")
    return prefixes[0]


def _check_structure(value: Any) -> None:
    """Walk the loaded value once, without recursion: bounded depth and size, known types only."""
    todo: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    key_chars = 0
    while todo:
        item, depth = todo.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise _TooLarge(f"its pickle expands to more than {MAX_NODES} values")
        if type(item) in (dict, collections.OrderedDict):
            if depth >= MAX_DEPTH:
                raise _TooLarge(f"its pickle nests deeper than {MAX_DEPTH} levels")
            for k, v in item.items():
                if isinstance(k, str):
                    key_chars += len(k)
                todo.append((v, depth + 1))
            if key_chars > MAX_KEY_CHARS:
                raise _TooLarge(f"its pickle expands to more than {MAX_KEY_CHARS} characters of names")
        elif type(item) in (list, tuple):
            if depth >= MAX_DEPTH:
                raise _TooLarge(f"its pickle nests deeper than {MAX_DEPTH} levels")
            if nodes + len(item) > MAX_NODES:
                raise _TooLarge(f"its pickle expands to more than {MAX_NODES} values")
            todo.extend((v, depth + 1) for v in item)
        elif not isinstance(item, _LEAVES) or (isinstance(item, np.ndarray) and item.dtype.hasobject):
            raise _Corrupt(f"the pickle yields {_describe(item)}, which a checkpoint of tensors never holds")


def read_pth(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Read a torch zip checkpoint into nested dicts / lists of ``np.ndarray``.

    At most ``max_bytes`` of storage are read. Raises :class:`CheckpointError`
    for a missing, legacy, truncated, corrupt or oversized file, and for any
    pickle that references a global outside the tensor-only allow-list
    (nothing from the file is executed).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(len(_LEGACY_MAGIC))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file not found: {p}") from None
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {p}: {e.strerror or e}") from None
    if head == _LEGACY_MAGIC:
        raise CheckpointError(f"{p}: legacy (pre-1.6, non-zip) torch format is not supported; "
                              "re-save it with a current torch.save")
    try:
        with zipfile.ZipFile(p) as archive:
            prefix = _record_prefix(archive, p)
            byteorder = "little"
            names = set(archive.namelist())
            if len(names) != len(archive.namelist()):
                raise _Corrupt("the archive holds two members of the same name")
            if f"{prefix}/byteorder" in names:
                info = archive.getinfo(f"{prefix}/byteorder")
                if info.file_size > 16:
                    raise _Corrupt("the byteorder record is not 'little' or 'big'")
                byteorder = read_member(archive, info).decode("ascii", "replace").strip()
                if byteorder not in ("little", "big"):
                    raise _Corrupt(f"unknown byteorder record {_describe(byteorder)}")
            info = archive.getinfo(f"{prefix}/data.pkl")
            if info.file_size > MAX_PICKLE_BYTES:
                raise _TooLarge(f"its pickle declares {info.file_size} bytes (at most {MAX_PICKLE_BYTES})")
            value = _Reader(read_member(archive, info), archive, prefix, byteorder, max_bytes).load()
            _check_structure(value)
            return value
    except _Corrupt as e:
        raise CheckpointError(f"{p}: {e}; the file is truncated or corrupt") from None
    except _TooLarge as e:
        raise CheckpointError(f"{p}: {e}; refusing to load it (the file is corrupt or not a checkpoint "
                              "of this model)") from None
    except _Refused as e:
        raise CheckpointError(f"{p}: {e}") from None
    except (zipfile.BadZipFile, zlib.error) as e:
        raise CheckpointError(f"{p}: not a readable torch zip archive ({type(e).__name__}: {e}); the "
                              "file is truncated, corrupt or not a .pth checkpoint") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, struct.error, RecursionError, OSError) as e:
        raise CheckpointError(f"{p}: corrupt checkpoint pickle ({type(e).__name__}: {e}); "
                              "re-download or re-save the file") from None
