"""The registry of figures (sim.output.figures): every figure a results directory holds is
registered by name with the function that draws it, and the results directory draws
through it; pytorch is drawn apart from the fixes, as a reference."""

import pytest
from matplotlib.figure import Figure as MplFigure

from sim.analysis.growth import Growth
from sim.output import figures, plot, results

REF = "burn-0.22.1"


def _g(policy, **kw):
    return Growth("w", "detach", policy, "", unit="per step", x_unit="steps", **kw)


def _growths():
    return [_g(REF, memory_total_bytes=10**7, memory_bytes=3000, ms_first=0.95, ms_last=81.6),
            _g("pytorch", memory_total_bytes=0, memory_bytes=0, ms_first=0.28, ms_last=0.28),
            _g("dedup-sweep", memory_total_bytes=10**7, memory_bytes=3000, ms_first=0.95,
               ms_last=2.49)]


def test_each_figure_is_registered_with_the_function_that_draws_it():
    assert list(figures.FIGURES) == ["workload", "summary", "fix"]
    assert figures.FIGURES["workload"].function is plot.workload_figure
    assert figures.FIGURES["summary"].function is plot.summary_figure
    assert figures.FIGURES["fix"].function is plot.fix_figure
    assert all(entry.description for entry in figures.FIGURES.values())


def test_draw_goes_through_the_registry_and_refuses_unknown_names(monkeypatch):
    fig = figures.draw("summary", _growths())
    assert isinstance(fig, MplFigure)
    with pytest.raises(KeyError, match="no figure 'nope'"):
        figures.draw("nope")
    with pytest.raises(ValueError, match="already registered"):
        figures.register("summary", plot.summary_figure, "again")
    # a figure registered under another function is the one the results directory draws
    calls = []

    def stand_in(*args):
        calls.append(args)
        return plot.summary_figure(*args)
    monkeypatch.setitem(figures.FIGURES, "summary",
                        figures.Figure("summary", stand_in, "a stand-in"))
    png = results._draw(("summary.png", "summary", (_growths(),), {}))
    assert png.startswith(b"\x89PNG") and len(calls) == 1


def test_the_summary_shows_pytorch_apart_as_the_reference():
    fig = plot.summary_figure(_growths())
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [REF, "dedup-sweep", "reference (PyTorch)"]   # last, labelled
    # a rule between the fixes and the reference
    assert any(line.get_xdata()[0] == 1.5 for line in ax.lines)
