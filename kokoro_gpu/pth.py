"""A restricted reader of PyTorch ``.pth`` files that never runs code from the file.

A ``torch.save`` file is a zip archive: ``<prefix>/data.pkl`` is a pickle whose
tensors refer to raw storages ``<prefix>/data/<key>`` through persistent ids.
Unpickling it with :mod:`pickle` as-is would let the file call any importable
function, so this reader resolves only the handful of globals a tensor
checkpoint needs, each to a local NumPy stand-in, and refuses everything else.
Tensors come back as NumPy arrays (bfloat16, which NumPy lacks, as float32).
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
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


class _StorageType:
    """What ``torch.XStorage`` resolves to: only its element type."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bfloat16 = name == "BFloat16Storage"


class _Storage:
    """One raw storage, decoded to a 1-D native-endian array."""

    def __init__(self, data: np.ndarray, bfloat16: bool) -> None:
        self.data = data
        self.bfloat16 = bfloat16


class _Corrupt(Exception):
    """A structural problem in the archive; read_pth reports it with the file name."""


def _is_index(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _rebuild_tensor_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, *_rest: Any) -> np.ndarray:
    """Stand-in for ``torch._utils._rebuild_tensor_v2``: a view into the storage, copied."""
    if not isinstance(storage, _Storage):
        raise _Corrupt("malformed tensor record in the pickle (its storage is not a storage)")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)
            and all(map(_is_index, size)) and all(map(_is_index, stride)) and _is_index(storage_offset)):
        raise _Corrupt(f"malformed tensor record in the pickle (size {size!r}, stride {stride!r}, "
                       f"offset {storage_offset!r})")
    data = storage.data
    if 0 not in size:
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
        if last >= data.size:
            raise _Corrupt(f"a tensor of shape {size} reaches element {last} of a storage of "
                           f"{data.size} elements")
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


def _rebuild_parameter(data: Any, *_rest: Any) -> Any:
    """Stand-in for ``torch._utils._rebuild_parameter``: a Parameter is just its data here."""
    return data


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
    **{("torch", name): _StorageType(name) for name in _STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, byteorder: str,
                 path: Path) -> None:
        super().__init__(io.BytesIO(data))
        self._archive = archive
        self._prefix = prefix
        self._byteorder = byteorder
        self._path = path
        self._storages: dict[tuple[str, str], _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise CheckpointError(
                f"{self._path}: refusing to load: the pickle references the global {module}.{name}, "
                "which a checkpoint of plain tensors never needs; only load files from sources you trust"
            ) from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and _is_index(pid[4])):
            raise _Corrupt(f"unexpected persistent id {pid!r} in the pickle")
        stype, key, numel = pid[1], pid[2], pid[4]
        cached = self._storages.get((key, stype.name))
        if cached is not None:
            return cached
        entry = f"{self._prefix}/data/{key}"
        try:
            raw = self._archive.read(entry)
        except KeyError:
            raise _Corrupt(f"storage {entry} is missing from the archive") from None
        order = "<" if self._byteorder == "little" else ">"
        dtype = np.dtype(_STORAGE_DTYPES[stype.name]).newbyteorder(order)
        if len(raw) < numel * dtype.itemsize:
            raise _Corrupt(f"storage {entry} holds {len(raw)} bytes but needs {numel * dtype.itemsize}")
        data = np.frombuffer(raw, dtype=dtype, count=numel)
        if not dtype.isnative:
            data = data.astype(dtype.newbyteorder("="))
        storage = _Storage(data, stype.bfloat16)
        self._storages[(key, stype.name)] = storage
        return storage


def _record_prefix(archive: zipfile.ZipFile, path: Path) -> str:
    prefixes = [n[: -len("/data.pkl")] for n in archive.namelist()
                if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(prefixes) != 1:
        raise CheckpointError(f"{path}: not a torch.save archive (expected one <name>/data.pkl, "
                              f"found {len(prefixes)}); pass a checkpoint written by torch.save")
    return prefixes[0]


def read_pth(path: str | Path) -> Any:
    """Read a torch zip checkpoint into nested dicts / lists of ``np.ndarray``.

    Raises :class:`CheckpointError` for a missing, legacy, truncated or
    corrupt file, and for any pickle that references a global outside the
    tensor-only allow-list (nothing from the file is executed).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(len(_LEGACY_MAGIC))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file not found: {p}") from None
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {p}: {e}") from None
    if head == _LEGACY_MAGIC:
        raise CheckpointError(f"{p}: legacy (pre-1.6, non-zip) torch format is not supported; "
                              "re-save it with a current torch.save")
    try:
        with zipfile.ZipFile(p) as archive:
            prefix = _record_prefix(archive, p)
            names = set(archive.namelist())
            byteorder = "little"
            if f"{prefix}/byteorder" in names:
                byteorder = archive.read(f"{prefix}/byteorder").decode("ascii", "replace").strip()
                if byteorder not in ("little", "big"):
                    raise _Corrupt(f"unknown byteorder record {byteorder!r}")
            pickled = archive.read(f"{prefix}/data.pkl")
            return _Unpickler(pickled, archive, prefix, byteorder, p).load()
    except _Corrupt as e:
        raise CheckpointError(f"{p}: {e}; the file is truncated or corrupt") from None
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{p}: not a readable torch zip archive ({e}); the file is truncated, "
                              "corrupt or not a .pth checkpoint") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, OSError) as e:
        raise CheckpointError(f"{p}: corrupt checkpoint pickle ({type(e).__name__}: {e}); "
                              "re-download or re-save the file") from None
