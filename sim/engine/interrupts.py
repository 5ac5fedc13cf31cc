"""Ctrl-C: one line, exit 130 within 2 s, whatever the process was doing.

Python turns SIGINT into :class:`KeyboardInterrupt` wherever the main thread is. Two
places lose it: a ``__del__`` (a simulated tensor's drop, which runs often in an op
loop) prints "Exception ignored in ..." and the program goes on, and an object whose
constructor it interrupts is dropped half-built. The handler :func:`install` puts in
place for the ``sim`` command therefore raises the interrupt only outside a finalizer
(inside one it tries again 20 ms later), and starts a watchdog that ends the process
(:data:`DEADLINE_S`) should the main thread not get to its exit in time (a C call that
does not return, a pool that does not stop). The command's exit then skips the
interpreter's teardown (:func:`exit_now`): freeing a long run's millions of simulated
objects one by one took tens of seconds, and is no use to a process that ends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

from .workers import stop_all

__all__ = ["install", "exit_now", "held_interrupt", "DEADLINE_S", "MESSAGE"]

#: seconds from the first Ctrl-C to the watchdog's exit
DEADLINE_S = 1.5

MESSAGE = "sim: error: interrupted"

#: names of functions an interrupt must not be raised in (it would be lost there)
FINALIZERS = frozenset({"__del__", "_release"})

_said = threading.Lock()     # whoever prints the message first holds it
_state = {"pid": None, "watchdog": None}


def install() -> None:
    """Handle SIGINT in this process as described above (the ``sim`` command, from its
    main thread)."""
    _state["pid"] = os.getpid()
    signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(signum, frame):
    if os.getpid() != _state["pid"]:
        return      # a worker forked before its initializer let Ctrl-C go: the parent's
    if _in_finalizer(frame):
        retry = threading.Timer(0.02, _interrupt_main)
        retry.daemon = True
        retry.start()
        return
    if _state["watchdog"] is None:
        watchdog = _state["watchdog"] = threading.Timer(DEADLINE_S, exit_now, (130,))
        watchdog.daemon = True
        watchdog.start()
    raise KeyboardInterrupt


def _interrupt_main() -> None:
    import _thread
    _thread.interrupt_main(signal.SIGINT)


def _in_finalizer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name in FINALIZERS:
            return True
        frame = frame.f_back
    return False


def exit_now(code: int = 130, message: str = MESSAGE) -> None:
    """Print ``message`` (once, whichever thread comes first), stop this process's
    worker pools (:func:`sim.engine.workers.stop_all`) and end the process with ``code`` at
    once, without the interpreter's teardown."""
    if not _said.acquire(blocking=False):
        return      # the other thread is exiting already
    try:
        stop_all()
    except Exception:   # best effort: the process ends regardless
        pass
    try:
        sys.stdout.flush()
    except Exception:   # a reader that went away
        pass
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)


@contextmanager
def held_interrupt():
    """Hold Ctrl-C back for the block (a few renames that must happen together): an
    interrupt that arrives meanwhile is raised as :class:`KeyboardInterrupt` when the
    block ends. Outside the main thread, or where SIGINT is not Python's to handle,
    the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived = []
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):      # SIG_IGN, SIG_DFL, or not set from Python
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if arrived:
        previous(signal.SIGINT, None)   # as if it arrived now (the default: KeyboardInterrupt)
