"""The registry of figures: each figure a results directory can hold, by name, with the
function that draws it.

``sim sweep``, ``sim compare``, ``sim fixes`` and ``sim plot`` draw every figure
through :func:`draw` (:func:`sim.output.results.render` decides which to draw, into which
file); a new figure is a drawing function (returning a ``matplotlib.figure.Figure``) and
one :func:`register` call.

Examples
--------
>>> sorted(FIGURES)
['fix', 'summary', 'workload']
>>> FIGURES["summary"].function.__name__
'summary_figure'
>>> draw("no-such-figure")
Traceback (most recent call last):
KeyError: "no figure 'no-such-figure' (registered: fix, summary, workload)"
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from . import plot

__all__ = ["Figure", "FIGURES", "register", "draw"]


class Figure(NamedTuple):
    """A registered figure: its ``name``, the ``function`` that draws it (arguments in,
    a ``matplotlib.figure.Figure`` out), and what it shows (``description``)."""

    name: str
    function: Callable
    description: str


#: the registered figures, by name, in registration order
FIGURES: dict = {}


def register(name, function, description) -> Figure:
    """Register ``function`` as the figure ``name``; a name already registered raises
    ``ValueError`` (two figures would write over each other)."""
    if name in FIGURES:
        raise ValueError(f"figure '{name}' is already registered "
                         f"({FIGURES[name].function.__qualname__})")
    FIGURES[name] = entry = Figure(name, function, description)
    return entry


def draw(name, *args):
    """The ``matplotlib.figure.Figure`` of the registered figure ``name`` drawn with
    ``args``; ``KeyError`` for a name nobody registered."""
    entry = FIGURES.get(name)
    if entry is None:
        raise KeyError(f"no figure '{name}' (registered: {', '.join(sorted(FIGURES))})")
    return entry.function(*args)


register("workload", plot.workload_figure,
         "one workload: a panel per (variant, metric), every policy's predicted curve, the "
         "measured points and their errors (<workload>.png)")
register("summary", plot.summary_figure,
         "policies x runs: memory growth and time per loop unit against burn-0.22.1, the "
         "reference frameworks apart (summary.png)")
register("fix", plot.fix_figure,
         "one fix measured on patched burn (sim fixes): a panel per run where the fix matters, "
         "its measured points and predicted line beside unpatched burn-0.22.1's in grey "
         "(docs/fixes/<fix>.png)")
