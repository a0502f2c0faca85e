"""Freed memory kept in the process for reuse by the CPU forward pass (glibc's malloc).

The generator's sequences are tens of MB each (128 channels x 24 kHz) and a
forward pass allocates and frees hundreds of them. glibc serves blocks above
its mmap threshold (at most 32 MB, adapting) with fresh mmap'd pages that the
kernel faults in and zeroes on first touch, and returns them on free: on a
long utterance that page-fault work is about a fifth of the CPU time.
Raising the mmap threshold keeps freed blocks in the heap, so the next array
of the same size reuses memory that is already mapped; trimming is off, since
a long utterance frees more than a gigabyte at the heap's top at its end (a
1 GiB trim threshold still gave its memory back and faulted it in again on the
next pass: 15k - 40k faults, 2.5 - 3.3 s of system time on a virtual machine).
One arena for every thread: a worker thread's arena grows in heaps of at most
64 MB that glibc unmaps as soon as they are empty, whatever the thresholds, so
the branches' sequences (tens of MB each) were mapped and faulted in again on
every pass. Large NumPy blocks make few calls to malloc, so the threads do not
contend for the one arena. The cost: the process keeps its peak heap (~3 GB
after a 21 s utterance) instead of shrinking after a long utterance.
Process-wide, for threads that allocate for the first time after the call; a
no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Blocks up to this size come from the heap.
_KEEP_BYTES = 1 << 30
# The trim threshold that turns trimming off (mallopt(3)).
_NEVER_TRIM = -1


@functools.cache
def keep_freed_memory() -> bool:
    """glibc keeps freed memory for reuse (blocks up to 1 GiB) in one arena; True where it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # musl and other C libraries lack mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all([mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES), mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM),
                mallopt(_M_ARENA_MAX, 1)])
