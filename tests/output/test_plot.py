"""Figures read as a user would look at them: phases that are series of their own get
their x values as ticks and their name once under them."""

from sim.output.plot import workload_figure


def rows(phase, unit, xs):
    return [{"experiment": "w", "variant": "v", "phase": phase, "x": float(x), "x_unit": unit,
             "metric": "rss_bytes", "value": 1000.0 + x, "unit": "B", "note": "",
             "policy": "burn-0.22.1", "profile": "p", "params": ""} for x in xs]


def test_series_phases_are_named_once_under_their_x_values():
    predicted = rows("train", "step", (50, 100)) + rows("generate", "samples", (50, 100, 150))
    fig = workload_figure("w", "a workload", predicted, [])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["50", "100", "50", "100", "150"]
    names = [t.get_text() for t in ax.texts]
    assert names == ["train (step)", "generate (samples)"]


def test_phases_at_one_x_keep_their_names_as_ticks():
    predicted = rows("after-loop", "iterations", (10,)) + rows("after-backward", "iterations",
                                                               (10,))
    fig = workload_figure("w", "a workload", predicted, [])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["after-loop", "after-backward"]
    assert ax.texts == [] or all(t.get_text() == "" for t in ax.texts)
