"""Local worker processes that leave Ctrl-C to the parent and stop within a deadline.

A sweep's cells and a report's figures run in process pools (``--jobs``). Ctrl-C at a
terminal signals the whole foreground process group, workers included: a worker that
took it would print its own traceback, and a pool whose worker died mid-task can leave
the parent waiting on a pipe for ever. So every worker ignores SIGINT, and the parent,
on an interrupt or an error, terminates its workers and joins them with a deadline
(:func:`stop`, :func:`stop_all`) instead of waiting for their tasks.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager

__all__ = ["ignore_sigint", "local_pool", "stop", "stop_all", "JOIN_DEADLINE_S"]

#: how long :func:`stop` waits for terminated workers before it kills them
JOIN_DEADLINE_S = 0.5

#: the pools of this process that are running (stopped by :func:`stop_all`)
_LIVE = []


def ignore_sigint() -> None:
    """A worker's initializer: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _init(initializer, initargs) -> None:
    ignore_sigint()
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def local_pool(workers: int, initializer=None, initargs=()):
    """A :class:`concurrent.futures.ProcessPoolExecutor` of ``workers`` processes that
    ignore SIGINT (then run ``initializer(*initargs)``), for the block. A block that
    ends normally waits for the pool's tasks; one that raises (an interrupt, a failed
    task) stops the workers at once (:func:`stop`)."""
    from concurrent.futures import ProcessPoolExecutor
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init,
                               initargs=(initializer, initargs))
    _LIVE.append(pool)
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        if pool in _LIVE:
            _LIVE.remove(pool)


def stop(pool, deadline: float = JOIN_DEADLINE_S) -> None:
    """Stop ``pool`` now: queued tasks cancelled, its worker processes terminated and
    joined within ``deadline`` seconds (then killed), the pool's own thread not waited
    for."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    except Exception:    # a pool broken by a dead worker: its processes are stopped below
        pass
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):   # gone already, or closed
            pass
    end = time.monotonic() + deadline
    for process in processes:
        try:
            process.join(max(0.0, end - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(0.1)
        except (OSError, ValueError, AssertionError):
            pass
    if pool in _LIVE:
        _LIVE.remove(pool)


def stop_all() -> None:
    """Stop every pool of this process that is still running (an interrupt's exit)."""
    for pool in list(_LIVE):
        stop(pool)

