"""docs/api.md cannot rot: it is the text sim.output.apidoc generates from the code, every public
member of the classes it lists has an entry saying what it consumes, and its worked
example (Adam and a validation pass) runs as a workload."""

import inspect

import pytest

import sim.burn.nn
import sim.burn.optim
import sim.burn.tensor
from sim.output import apidoc
from sim.engine.runner import run_cell


def test_docs_api_md_is_what_the_code_generates():
    text = apidoc.render()
    assert apidoc.DOC.read_text(encoding="utf-8") == text, \
        "docs/api.md is stale: run `python -m sim.output.apidoc`"


def _listed():
    apidoc.render()
    for _, module, items in apidoc.SECTIONS:
        for obj, members in items:
            yield module, obj, members


def test_every_public_member_says_what_it_consumes():
    for module, obj, members in _listed():
        if not inspect.isclass(obj):
            assert obj.__name__ in apidoc.CONSUMES
            continue
        names = members if members is not None else apidoc.public_members(obj)
        for name in names:
            key = f"{obj.__name__}.{name}"
            assert key in apidoc.CONSUMES or key in apidoc.INTERNAL, \
                f"{module}.{key}: public, but neither documented in sim/output/apidoc.py nor internal"
    # and no entry names a member that is gone
    classes = {obj.__name__: obj for _, obj, _ in _listed()}
    for key in apidoc.CONSUMES:
        owner, _, member = key.partition(".")
        if member:
            assert hasattr(classes[owner], member), key
        else:
            assert owner in classes, key


def test_every_exported_name_of_the_workload_modules_is_documented():
    text = apidoc.DOC.read_text(encoding="utf-8")
    names = (sim.burn.tensor.__all__ + sim.burn.nn.__all__
             + ["GradientsParams", "ModuleOptimizer", "Sgd", "Adam"])
    for name in names:
        assert f".{name}" in text, name
    # the reads a workload makes for its own metrics
    for read in ("sim.heap.live_bytes", "sim.now_ns", "sim.allocator.page_bytes",
                 "sim.rss_bytes()", "sim.loop_index"):
        assert f"`{read}`" in text, read
    for signature in ("`Simulation.sample(x, x_unit, phase='', observables=True, **metrics)`",
                      "`Simulation.repeat(n, body)`", "`ModuleOptimizer.step(lr, module, grads)`",
                      "`GradientsParams.from_grads(grads, module)`", "`Tensor.into_scalar()`"):
        assert signature in text, signature


def test_the_consumed_calls_are_named():
    text = apidoc.DOC.read_text(encoding="utf-8")
    for line in ("- `Mlp.forward(x)`", "- `Linear.forward(x)`", "- `Tensor.into_scalar()`",
                 "- `ModuleOptimizer.step(lr, module, grads)`"):
        entry = text[text.index(line):].split("\n")[1]
        assert entry.startswith("  *Consumes:* ") and "nothing" not in entry, (line, entry)


@pytest.fixture
def example_workload(tmp_path):
    path = tmp_path / "my_train.py"
    path.write_text(apidoc.EXAMPLE, encoding="utf-8")
    return str(path)


def test_the_worked_example_runs_and_its_training_loop_is_flat(example_workload):
    rows = run_cell(example_workload, "default")
    by = {(r["x"], r["metric"]): r["value"] for r in rows}
    assert not any(r["metric"] == "panic" for r in rows)
    assert by[(20, "heap_bytes_delta")] == by[(40, "heap_bytes_delta")]
    assert by[(20, "live_graphs")] == by[(40, "live_graphs")]
    # 20 identical Adam steps between the samples; before the first, the 4 parameters'
    # RootSteps were registered once
    assert by[(40, "registered_steps")] - by[(20, "registered_steps")] == \
        by[(20, "registered_steps")] - 4


def test_the_metric_names_and_the_workload_files_variables_are_in_the_reference():
    """A user writing a workload had to open sim/units.py for the metric names
    `sim.sample` takes, and sim/engine/workloads.py for the variables a workload file may
    set (new-user walkthrough, session 58): both are sections of the page, generated."""
    from sim.units import METRICS
    text = apidoc.DOC.read_text(encoding="utf-8")
    metrics = text[text.index("## Metrics"):]
    for name, metric in METRICS.items():
        assert f"| `{name}` | {metric.unit or '-'} | {metric.kind} |" in metrics, name
    workload_file = text[text.index("## The workload file"):text.index("## The simulation")]
    for name in ("EXPERIMENT", "VARIANTS", "PARAMS", "run(sim, variant, **params)",
                 "DESCRIPTION", "POSITIVE", "CHOICES", "MEASURED", "SWEEP", "X_UNITS",
                 "check(variant, **params)", "QUICK"):
        assert f"`{name}`" in workload_file, name
