"""Loading a user's Python file (a workload or a policy) as a module of its own."""

from __future__ import annotations

import importlib.util
import traceback

from .errors import UserError

__all__ = ["exec_user_file", "describe_raise", "where_raised", "exception_frames",
           "suspended_frames", "raised_text", "message_text"]


def exec_user_file(path, prefix):
    """Execute the Python file ``path`` as a new module named ``<prefix>_<hash of path>``.

    Returns the module. A syntax error or any exception raised while the file runs
    is a :class:`~sim.errors.UserError` naming the file and, where the traceback
    passes through it, the line (a ``UserError`` it raises itself passes through).
    """
    module_name = f"{prefix}_{abs(hash(str(path)))}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except UserError:
        raise
    except Exception as exc:  # a user's file raising at import
        raise UserError(f"{where_raised(exc, path)}: {raised_text(exc)} while loading"
                        f"{message_text(exc)}") from None
    return module


def exception_frames(exc) -> list:
    """The frames of ``exc``'s traceback, outermost first, following ``__cause__`` (SimPy
    re-raises a process's exception as a copy whose cause is the original)."""
    frames, seen = [], exc
    while seen is not None:
        frames[:0] = _frames(seen.__traceback__) + getattr(seen, "suspended", [])
        seen = seen.__cause__
    return frames


def suspended_frames(generator) -> list:
    """Where ``generator`` and each generator it delegates to (``yield from``) stand,
    outermost first, as :class:`traceback.FrameSummary` s: an error raised between two
    of its steps (a budget checked at a ``yield``) was raised at those lines. An
    exception given them as its ``suspended`` attribute has them as its innermost
    frames in :func:`exception_frames`."""
    frames = []
    while generator is not None and getattr(generator, "gi_frame", None) is not None:
        frame = generator.gi_frame
        frames.append(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno,
                                             frame.f_code.co_name, lookup_line=False))
        generator = generator.gi_yieldfrom
    return frames


def _frames(tb) -> list:
    """``traceback.extract_tb(tb)`` with a line for every frame: one stopped at an
    instruction that has none (a loop's jump back, where a budget's alarm can land) gets
    the line before it (:func:`line_before`), not ``None``."""
    frames = traceback.extract_tb(tb)
    for frame in frames:
        if frame.lineno is None:
            frame.lineno = line_before(tb.tb_frame.f_code, tb.tb_lasti)
        tb = tb.tb_next
    return frames


def line_before(code, offset):
    """The source line of ``code``'s last instruction at or before bytecode ``offset`` that
    has one (None if none has)."""
    line = None
    for start, _, number in code.co_lines():
        if start > offset:
            break
        if number is not None:
            line = number
    return line


def where_raised(exc, path) -> str:
    """``PATH:LINE`` of the innermost frame of ``exc``'s traceback in the file ``path``,
    or ``PATH`` alone if the traceback never passes through it."""
    for frame in reversed(exception_frames(exc)):
        if frame.filename == str(path):
            return f"{path}:{frame.lineno}"
    return str(path)


def raised_text(exc) -> str:
    """``raised TYPE``: the start of the one error line about a user's exception."""
    return f"raised {type(exc).__name__}"


def message_text(exc) -> str:
    """``": <first line of the message>"``, or nothing for an exception without one."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f": {text}" if text else ""


def describe_raise(exc, path, what) -> str:
    """``PATH:LINE: WHAT raised TYPE: MESSAGE``, the one line about an exception raised
    by the code of a user's file (``what``: e.g. ``policy NAME``)."""
    return f"{where_raised(exc, path)}: {what} {raised_text(exc)}{message_text(exc)}"
