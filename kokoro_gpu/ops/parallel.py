"""Independent branches of the CPU forward pass run on worker threads.

NumPy releases the GIL inside BLAS calls, FFTs, copies and ufunc loops, so
branches that do not depend on each other (the F0 and energy stacks, the
generator's residual blocks and source branches, the halves of a large GEMM)
run on separate cores. The CPU backend runs BLAS single-threaded meanwhile
(``blas_single_threaded``): one BLAS call split across threads synchronises
them per call, which costs more than it gains on the model's many mid-sized
GEMMs and collapses when other processes share the cores.

Work submitted from a worker thread runs inline on that worker, so nested
branches cannot deadlock the pool.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_in_worker = threading.local()
_blas_controller: Any = None  # threadpoolctl.ThreadpoolController, made on first use


def worker_count() -> int:
    """Threads used for branches: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _mark_worker() -> None:
    _in_worker.active = True


def _get_pool() -> ThreadPoolExecutor | None:
    global _pool
    if worker_count() < 2 or getattr(_in_worker, "active", False):
        return None
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(worker_count(), thread_name_prefix="kokoro-cpu",
                                       initializer=_mark_worker)
    return _pool


def spawn(task: Callable[[], T]) -> Future[T]:
    """Start ``task`` on a worker (inline when there is no pool or when called from a worker)."""
    pool = _get_pool()
    if pool is not None:
        return pool.submit(task)
    done: Future[T] = Future()
    try:
        done.set_result(task())
    except BaseException as e:
        done.set_exception(e)
    return done


def run_parallel(tasks: list[Callable[[], T]]) -> list[T]:
    """Every task's result, in order: the first runs on the calling thread, the others on workers.

    A task still queued when the calling thread is done with its own (every
    worker busy with other branches) is taken back and run on the calling
    thread instead of waiting for a worker.
    """
    if len(tasks) <= 1 or _get_pool() is None:
        return [task() for task in tasks]
    futures = [spawn(task) for task in tasks[1:]]
    results = [tasks[0]()]
    for task, future in zip(tasks[1:], futures, strict=True):
        results.append(task() if future.cancel() else future.result())
    return results


@contextmanager
def blas_single_threaded() -> Iterator[None]:
    """BLAS limited to one thread inside the block (threadpoolctl), restored after."""
    global _blas_controller
    if _blas_controller is None:  # finding the loaded BLAS libraries takes milliseconds: once
        from threadpoolctl import ThreadpoolController

        _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=1, user_api="blas"):
        yield
