"""The Python state a loop body reads, watched while fast-forward probes the loop.

Fast-forward proves iterations identical from the simulated state; it does not call the
body for the iterations it applies. A body whose behaviour depends on Python state it
changes itself (a counter it increments, ``if i % 100 == 0: loss.backward()``) would have
its branches extrapolated away. So, around each probed iteration, :func:`plain_state`
takes the plain values (ints, floats, bools, strings, None) the body can reach: its
closure cells and the globals its code names, and the plain values one level inside
those that are dicts or lists (and inside the instance of a bound method), whatever
else they hold (tensors, models and the simulation change every iteration, as
expected, and are not read). A dict or list that only grew, its old items in place (a
log of losses, a list counting the body's calls), has not moved: what the loop
branches on cannot be told from what it logs. :mod:`sim.engine.fastforward.repeat` runs a loop exactly
when its agreeing probes changed that state, and :func:`note_moved` prints one note
naming the loop (once per loop and process).

Examples
--------
>>> count = {"i": 0}
>>> def body():
...     count["i"] += 1
>>> before = plain_state(body); body()
>>> moved(before, plain_state(body))
['count']
"""

from __future__ import annotations

import sys

__all__ = ["plain_state", "moved", "note_moved"]

_PLAIN = (int, float, bool, str, type(None))
_SKIP = object()
#: the loops noted already (code objects): each is noted once per process
_NOTED = set()


def _plain(value):
    """A comparable image of ``value``'s plain content, or ``_SKIP`` (none: an object)."""
    kind = type(value)
    if kind in _PLAIN:
        # a float as its bits (nan equals itself)
        return value.hex() if kind is float else value
    if kind is dict:
        return _Grown((key, _plain(v)) for key, v in value.items() if type(v) in _PLAIN)
    if kind is list:
        return _Grown(_plain(v) for v in value if type(v) in _PLAIN)
    return _SKIP


class _Grown(tuple):
    """The plain content of a dict or list, in order: one that only had items appended
    (a log of losses, a list counting the body's calls) has not moved."""

    __slots__ = ()

    def moved_from(self, old) -> bool:
        return not (type(old) is _Grown and len(old) <= len(self)
                    and self[:len(old)] == old)


def plain_state(body):
    """``((name, image), ...)`` of the plain values ``body`` can reach (see the module
    doc), or None where ``body`` is no Python function."""
    code = getattr(body, "__code__", None)
    if code is None:
        return None
    out = []
    for name, cell in zip(code.co_freevars, getattr(body, "__closure__", None) or ()):
        try:
            image = _plain(cell.cell_contents)
        except ValueError:          # a cell not yet filled
            continue
        if image is not _SKIP:
            out.append((name, image))
    names = getattr(body, "__globals__", {})
    for name in code.co_names:
        if name in names:
            image = _plain(names[name])
            if image is not _SKIP:
                out.append((name, image))
    owner = getattr(body, "__self__", None)
    if owner is not None and type(getattr(owner, "__dict__", None)) is dict:
        out.append(("self", _plain(owner.__dict__)))
    return tuple(out)


def moved(before, after) -> list:
    """The names whose plain values differ between two :func:`plain_state` images."""
    if before is None or after is None:
        return []
    old, new = dict(before), dict(after)
    out = []
    for name, image in after:
        was = old.get(name, _SKIP)
        if was != image and (type(image) is not _Grown or image.moved_from(was)):
            out.append(name)
    return out + [name for name in old if name not in new]


def note_moved(body, names, stream=None) -> None:
    """One line on stderr (once per loop): the loop ``body`` changed ``names`` from one
    probed iteration to the next, so it runs exactly."""
    code = getattr(body, "__code__", None)
    if code in _NOTED:
        return
    _NOTED.add(code)
    where = (f"{getattr(code, 'co_qualname', code.co_name)} "
             f"({code.co_filename}:{code.co_firstlineno})") if code is not None else repr(body)
    print(f"sim: note: the loop body {where} changes Python state it can read from one "
          f"iteration to the next ({', '.join(sorted(set(names)))}); fast-forward does "
          f"not call the body for the iterations it skips, so this loop runs exactly",
          file=stream or sys.stderr, flush=True)
