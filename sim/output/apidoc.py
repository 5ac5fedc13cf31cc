"""The workload API reference, ``docs/api.md``, generated from the code.

Every public class and function a workload or a policy may use is listed in
:data:`SECTIONS`, each with what it consumes (:data:`CONSUMES`); its signature
and summary come from the code (:func:`inspect.signature`, the docstring's first
paragraph), so the page changes when the code does. ``python -m sim.output.apidoc``
writes the page; ``tests/output/test_api_doc.py`` fails when the file is not what
:func:`render` gives, when a public method of a listed class has no entry here,
and runs the worked example (a training loop with Adam and a validation pass)
as a workload.
"""

from __future__ import annotations

import inspect
import re
import sys

from ..engine.simulation import Simulation
from ..burn.nn import Linear, Mlp, Param, Relu
from ..burn.optim import Adam, GradientsParams, ModuleOptimizer, Sgd
from ..paths import DOCS
from ..policies import Policy
from ..burn.tensor import BurnPanic, Device, Gradients, Tensor, drop
from ..engine import workloads
from ..units import METRICS, OBSERVABLES

__all__ = ["render", "SECTIONS", "CONSUMES", "EXAMPLE", "DOC", "public_members"]

#: the generated page, relative to the repository
DOC = DOCS / "api.md"

BORROWS = "borrows its operands (they drop when Python lets them go)"

#: "Class.member" or "module.function" -> what the call consumes, for every listed
#: member; a summary for members without a docstring is after "|"
#: what a policy's mirror class attribute is (sim.policies.mirror)
MIRROR_CLASS = ("mirror class (a fix replaces it with a subclass whose method is the patched "
                "one: sim.policies.mirror)")

CONSUMES = {
    # -- sim.engine.simulation.Simulation: the `sim` argument of run() ---------------------------------
    "Simulation.device": "nothing",
    "Simulation.repeat": "nothing; `body` is called with no arguments",
    "Simulation.sample": "nothing; yield what it returns",
    "Simulation.tick": "nothing; yield what it returns",
    "Simulation.spawn": "the generator (it runs as its own host thread)",
    "Simulation.rss_bytes": "nothing",
    "Simulation.now_ns": "nothing (a property)",
    "Simulation.live_graphs": "nothing",
    "Simulation.live_nodes": "nothing",
    "Simulation.observables": "nothing",
    "Simulation.record": "nothing",
    "Simulation.at": "nothing",
    # -- sim.burn.tensor --------------------------------------------------------------------------
    "Device.autodiff": "nothing (a new device value)",
    "Device.inner": "nothing|The inner (non-autodiff) device of this device.",
    "Device.memory_pool_usage": "nothing",
    "Device.memory_pool_details": "nothing",
    "Device.memory_cleanup": "nothing (free pages go back to the device)",
    "Tensor.from_floats": "nothing",
    "Tensor.zeros": "nothing|``Tensor::zeros``: a leaf of ``shape`` on ``device`` (its buffer "
                    "written).",
    "Tensor.ones": "nothing|``Tensor::ones``: as :meth:`zeros`, filled with ones.",
    "Tensor.random": "nothing",
    "Tensor.from_inner": "nothing (the new leaf shares the plain tensor's buffer)",
    "Tensor.clone": "nothing (a new handle; both must be dropped)",
    "Tensor.move": "the handle: the next op or conversion takes it by value",
    "Tensor.is_autodiff": "nothing|Whether the tensor is on an autodiff device.",
    "Tensor.is_tracked": "nothing|Whether the tensor has a node its backward can reach "
                         "(an input required grad).",
    "Tensor.is_require_grad": "nothing|Whether the tensor is a leaf that requires grad.",
    "Tensor.require_grad": "nothing (marks the handle and returns it)",
    "Tensor.set_require_grad": "nothing (sets the flag and returns the handle)|"
                               "``set_require_grad(flag)``: mark or unmark this leaf.",
    "Tensor.detach": "nothing (a new handle; `t.move().detach()` hands `t` over, as "
                     "burn's `detach(self)` takes it)",
    "Tensor.without_autodiff": "nothing (a new handle on the inner device; "
                               "`t.move().without_autodiff()` hands `t` over)",
    "Tensor.inner": "as `without_autodiff` (its alias)",
    "Tensor.autodiff": "nothing|This tensor put on its device's autodiff device: a new "
                       "leaf sharing the buffer (``Tensor::from_inner``).",
    "Tensor.backward": "nothing (the loss stays usable; its graph's steps are consumed: a "
                       "second backward reaching them panics)",
    "Tensor.grad": "nothing (a clone of the gradient `grads` keeps)",
    "Tensor.into_scalar": "the handle",
    "Tensor.dims": "nothing|The shape, as a tuple.",
    "Tensor.__add__": BORROWS + "|``a + b``: elementwise add (a number: `add_scalar`).",
    "Tensor.__radd__": BORROWS + "|``1.0 + a``.",
    "Tensor.__sub__": BORROWS + "|``a - b``: elementwise subtract (a number: scalar op).",
    "Tensor.__mul__": BORROWS + "|``a * b``: elementwise multiply (a number: `mul_scalar`).",
    "Tensor.__rmul__": BORROWS + "|``0.99 * a``.",
    "Tensor.__truediv__": BORROWS + "|``a / b``: elementwise divide (a number: `div_scalar`).",
    "Tensor.add": BORROWS + "|Elementwise add, as ``+``.",
    "Tensor.sub": BORROWS + "|Elementwise subtract, as ``-``.",
    "Tensor.mul": BORROWS + "|Elementwise multiply, as ``*``.",
    "Tensor.div": BORROWS + "|Elementwise divide, as ``/``.",
    "Tensor.mul_scalar": BORROWS + "|Multiply by a number.",
    "Tensor.add_scalar": BORROWS + "|Add a number.",
    "Tensor.div_scalar": BORROWS + "|Divide by a number.",
    "Tensor.matmul": BORROWS + "|Matrix product (batched over leading dims).",
    "Tensor.sum": BORROWS + "|Sum of all elements: a 1-element tensor.",
    "Tensor.mean": BORROWS + "|Mean of all elements: a 1-element tensor.",
    "Tensor.relu": BORROWS + "|``max(x, 0)``; its step saves the input.",
    "Tensor.exp": BORROWS + "|Elementwise ``exp``; its step saves the output.",
    "Tensor.log": BORROWS + "|Elementwise natural log; its step saves the input.",
    "Tensor.sqrt": BORROWS + "|Elementwise square root; its step saves the output.",
    "Tensor.square": BORROWS,
    "Tensor.powi_scalar": BORROWS,
    "Tensor.reshape": BORROWS + "|A view with another shape (same element count).",
    "Tensor.unsqueeze": BORROWS + "|A view with a dimension of 1 inserted at ``dim``.",
    "Gradients.remove": "the gradient it returns leaves the container",
    "Gradients.raw": "nothing (a property)",
    "drop": "the handle (Rust's `drop`)",
    # -- sim.burn.nn ------------------------------------------------------------------------------
    "Param.val": "nothing (a new handle; initialises a lazy parameter on first use)",
    "Param.consume": "the Param (re-filled with `from_mapped_value`)",
    "Param.from_mapped_value": "the tensor (it becomes the parameter's value)",
    "Param.is_initialized": "nothing|Whether a lazy parameter has been created yet.",
    "Param.valid": "nothing (a new Param off autodiff)",
    "Linear.forward": "`x` (moved into burn's `module::linear`)",
    "Linear.params": "nothing|The module's parameters, weight then bias.",
    "Linear.valid": "nothing|A copy of the module whose parameters are off autodiff "
                    "(``model.valid()``).",
    "Relu.forward": "nothing (borrows `x`)|``relu(x)``, one op.",
    "Relu.params": "nothing|No parameters: an empty list.",
    "Relu.valid": "nothing|The module itself (no parameters).",
    "Mlp.forward": "`x` (its first Linear moves it in)|``hidden``, ``activation``, "
                   "``output`` in turn.",
    "Mlp.params": "nothing|Every layer's parameters, in order.",
    "Mlp.valid": "nothing|A copy whose parameters are off autodiff (``model.valid()``).",
    # -- sim.burn.optim ---------------------------------------------------------------------------
    "GradientsParams.from_grads": "the `Gradients` of `backward()` (emptied of the module's "
                                  "parameters)",
    "GradientsParams.register": "`grad`",
    "GradientsParams.remove": "the gradient it returns leaves the container",
    "GradientsParams.drop": "the container",
    "ModuleOptimizer.step": "`grads` (dropped at the end of the step); the module's "
                            "parameters are replaced",
    # -- sim.policies.Policy (a policy file's base class) ----------------------------------
    "Policy.GraphMutexClient": MIRROR_CLASS,
    "Policy.GraphLocator": MIRROR_CLASS,
    "Policy.GraphCleaner": MIRROR_CLASS,
    "Policy.AutodiffServer": MIRROR_CLASS,
    "Policy.GraphMemoryManagement": MIRROR_CLASS,
    "Policy.register_untracked": "seam",
    "Policy.after_backward": "seam",
    "Policy.cleanup_orphaned_entries": "seam",
    "Policy.detach": "seam",
    "Policy.on_last_handle": "seam",
    "Policy.on_register": "seam",
    "Policy.on_node_removed": "seam",
    "Policy.in_place": "seam",
    "Policy.sgd_update": "seam",
    "Policy.adam_update": "seam",
    "Policy.rates": "seam",
    "Policy.may_compact": "seam",
    "Policy.first_backward": "seam",
    "Policy.describe": "nothing|What the policy changes and what it is expected to fix, in "
                       "one text (its ``changes`` and ``expected``).",
}

#: public members of the listed classes that are the simulator's own plumbing (the
#: mirror of burn calls them), not for workloads or policies
INTERNAL = {"Tensor.box", "Tensor.unbox", "Tensor.rewrap",
            "ModuleOptimizer.__init__"}


def _sections():
    return [
        ("The simulation (`sim`, the first argument of `run`)", "sim.engine.simulation", [
            (Simulation, ["device", "repeat", "sample", "tick", "spawn", "rss_bytes",
                          "now_ns", "live_graphs", "live_nodes", "observables", "record",
                          "at"])]),
        ("Devices and tensors", "sim.burn.tensor", [
            (Device, None), (Tensor, None), (Gradients, None), (drop, None),
            (BurnPanic, None)]),
        ("Modules", "sim.burn.nn", [(Param, None), (Linear, None), (Relu, None), (Mlp, None)]),
        ("Optimizers", "sim.burn.optim", [(GradientsParams, None), (ModuleOptimizer, ["step"]),
                                     (Sgd, None), (Adam, None)]),
        ("Policies (a fix's file)", "sim.policies", [(Policy, None)]),
    ]


#: the section list (built on first use: the classes import the whole simulator)
SECTIONS = None


def public_members(cls) -> list:
    """Names of ``cls``'s own public callables and properties (and the operators a
    workload writes: ``+ - * /``), in definition order."""
    operators = {"__add__", "__radd__", "__sub__", "__mul__", "__rmul__", "__truediv__"}
    out = []
    for name, value in cls.__dict__.items():
        if name.startswith("_") and name not in operators:
            continue
        if isinstance(value, (staticmethod, classmethod, property)) or callable(value):
            out.append(name)
    return out


def _summary(obj, fallback="") -> str:
    """The first paragraph of ``obj``'s docstring on one line (``fallback`` without one)."""
    doc = inspect.getdoc(obj) or ""
    first = doc.split("\n\n")[0].strip()
    return " ".join(first.split()) or fallback


def _signature(owner, name, value) -> str:
    """``Owner.name(args)`` as a workload calls it (no ``self``/``cls``)."""
    if isinstance(value, property):
        return f"{owner}.{name}"
    func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return f"{owner}.{name}(...)"
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    text = ", ".join(str(p.replace(annotation=inspect.Parameter.empty)) for p in params)
    ops = {"__add__": "a + b", "__radd__": "x + a", "__sub__": "a - b", "__mul__": "a * b",
           "__rmul__": "x * a", "__truediv__": "a / b"}
    if name in ops:
        return ops[name]
    return f"{owner}.{name}({text})"


def _entry(key, owner, name, value) -> list:
    consumes, _, fallback = CONSUMES[key].partition("|")
    func = value.fget if isinstance(value, property) else value
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    summary = _summary(func, fallback) or fallback
    return [f"- `{_signature(owner, name, value)}`: {summary}",
            f"  *Consumes:* {consumes}."]


def _class_lines(module, cls, members) -> list:
    lines = []
    if inspect.isclass(cls):
        sig = ""
        if not issubclass(cls, BaseException) and cls.__init__ is not object.__init__:
            try:
                params = [p for p in inspect.signature(cls).parameters.values()]
                sig = "(" + ", ".join(str(p.replace(annotation=inspect.Parameter.empty))
                                      for p in params) + ")"
            except (TypeError, ValueError):
                sig = ""
        lines += [f"### `{module}.{cls.__name__}{sig}`", "", _summary(cls), ""]
        names = members if members is not None else [
            n for n in public_members(cls) if f"{cls.__name__}.{n}" not in INTERNAL]
        for name in names:
            value = inspect.getattr_static(cls, name)
            lines += _entry(f"{cls.__name__}.{name}", cls.__name__, name, value)
        if not names:
            bases = [b.__name__ for b in cls.__mro__[1:] if b is not object]
            if bases:
                lines.append(f"Its methods are those of `{bases[0]}` (`optim.step(lr, "
                             f"module, grads)`)." if bases[0] == "ModuleOptimizer" else
                             f"Its methods are those of `{bases[0]}`.")
        lines.append("")
    else:
        sig = inspect.signature(cls)
        lines += [f"### `{module}.{cls.__name__}{sig}`", "", _summary(cls), "",
                  f"*Consumes:* {CONSUMES[cls.__name__].partition('|')[0]}.", ""]
    return lines


#: the worked example: a workload file (run as one by tests/output/test_api_doc.py)
EXAMPLE = '''\
"""A classifier-style loop: Adam steps on an autodiff device, a validation pass off it."""

from sim.burn.nn import Mlp
from sim.burn.optim import Adam, GradientsParams
from sim.burn.tensor import Tensor, drop

EXPERIMENT = "my-train"
PARAMS = {"steps": 40, "validate_every": 20, "val_batches": 5, "features": 64}
X_UNITS = {"my-train": "step"}


def run(sim, variant, steps, validate_every, val_batches, features):
    device = sim.device("flex").autodiff()
    model = Mlp(features, features, features, device)
    optim = Adam(sim)
    x = Tensor.random((32, features), device)
    t0, heap0 = sim.now_ns, sim.heap.live_bytes

    def train_step():
        nonlocal model
        # Mlp.forward consumes its input: pass a clone, keep x for the next step
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        drop(loss)
        model = optim.step(1e-3, model, grads)      # consumes grads; returns the module

    def validate():
        # off autodiff: the parameters as plain tensors, an input on the inner device
        net = model.valid()
        xv = Tensor.random((32, features), device.inner())
        sim.repeat(val_batches, lambda: net.forward(xv.clone()).sum().into_scalar())

    for step in range(validate_every, steps + 1, validate_every):
        sim.repeat(validate_every, train_step)      # identical steps: fast-forwarded
        validate()
        ms = (sim.now_ns - t0) / step / 1e6
        yield sim.sample(step, "step", ms_per_step=round(ms, 6),
                         heap_bytes_delta=sim.heap.live_bytes - heap0,
                         rss_bytes=sim.rss_bytes())
'''


def render() -> str:
    """The text of ``docs/api.md``."""
    global SECTIONS
    SECTIONS = _sections()
    lines = [
        "# Workload API reference",
        "",
        "<!-- generated by `python -m sim.output.apidoc` from the code's docstrings and "
        "sim/output/apidoc.py; tests/output/test_api_doc.py fails when this file is stale -->",
        "",
        "A workload is a Python file with a generator `run(sim, variant, **params)` "
        "(README: *Your own loop is a workload*; the module variables it may set: "
        "[The workload file](#the-workload-file)). It builds tensors and modules on devices it gets from `sim`, "
        "and yields `sim.sample(...)` where it records metrics. A policy is a subclass of "
        "`sim.policies.Policy` overriding the seams listed at the end "
        "([docs/policies.md](policies.md)).",
        "",
        "**Ownership.** An op *borrows* its operands, as `&tensor` in Rust: they stay "
        "usable, and drop when Python lets them go (`del t`, `drop(t)`, a name rebound). "
        "A call that *consumes* a handle takes it by value, as Rust moves it: the handle "
        "is unusable afterwards (using it is an error). `t.move()` hands a "
        "handle to the next op by value, so that the op frees its parts where burn does. "
        "Module `forward` consumes its input (pass `x.clone()` to keep `x`); "
        "`into_scalar()` consumes the tensor; an optimizer's `step` consumes the "
        "`GradientsParams`. Each entry below says what it consumes.",
        "",
        "**What a workload reads for its own metrics.** `sim.now_ns` (simulated time, "
        "ns), `sim.heap.live_bytes` and `sim.heap.live_blocks` (the live host heap, bytes "
        "and blocks), `sim.rss_bytes()` (process RSS, bytes), `sim.allocator.page_bytes` "
        "(the platform's page size), `sim.loop_index` (the iteration of the innermost "
        "`sim.repeat`), `device.memory_pool_usage()` (GPU pool, metal), and the "
        "bookkeeping counts `sim.live_graphs()`, `sim.live_nodes()`. The metric names "
        "`sim.sample` takes and their units: [Metrics](#metrics) (it refuses any other). "
        "Every "
        "`sim.sample` also records the bookkeeping observables itself ("
        + ", ".join(f"`{name}`" for name in OBSERVABLES) + "); a sample that names one "
        "of them is an error (the row would be there twice) unless it passes "
        "`observables=False`, which records the workload's metrics alone.",
        "",
    ]
    lines += _workload_file_lines()
    for title, module, items in SECTIONS:
        lines += [f"## {title}", ""]
        for obj, members in items:
            lines += _class_lines(module, obj, members)
    lines += _metric_lines()
    lines += [
        "## Worked example: a training loop with Adam and a validation pass",
        "",
        "Save as `my_train.py` and run `sim run my_train.py` (or `sim sweep -w "
        "my_train.py -p all`). Under `burn-0.22.1` each training step ends with a "
        "backward whose sweep frees what the step left; the validation pass runs on "
        "`model.valid()` with a plain input, so it registers nothing. "
        "tests/output/test_api_doc.py runs this file as a workload.",
        "",
        "```python",
        EXAMPLE.rstrip("\n"),
        "```",
        "",
    ]
    return "\n".join(lines)


def _markdown(text) -> str:
    """A docstring's reST inline markup as markdown: ``x`` and :role:`~a.b.x` -> `x`."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _workload_file_lines() -> list:
    """The section of what a workload file defines: the docstring of
    :mod:`sim.engine.workloads` (its list of module variables and the checks)."""
    doc = inspect.getdoc(workloads)
    body = doc[doc.index("A workload file"):]
    required, optional = body.split("\n\nOptional: ", 1)
    lines = ["## The workload file", ""]
    items = []
    for line in required.splitlines()[1:]:
        if not line.strip():
            continue
        if line.startswith("``"):
            name, _, rest = line.partition("  ")
            items.append([name.strip(), rest.strip()])
        else:
            items[-1][1] += " " + line.strip()
    lines += [f"- {_markdown(name)}: {_markdown(text)}" for name, text in items]
    lines += ["", "Optional: " + _markdown(" ".join(optional.split())), ""]
    return lines


def _metric_lines() -> list:
    """The table of the metric names ``sim.sample`` takes (:data:`sim.units.METRICS`)."""
    lines = ["## Metrics", "",
             "The names `sim.sample(x, x_unit, NAME=value, ...)` and `sim.record` take "
             "(`sim/units.py`): the unit a value is in, what it is; *signed*: it may be "
             "negative (a change since a reference point). Any other name is an error "
             "listing these. The bookkeeping observables are recorded by every sample.", "",
             "| metric | unit | kind | what |", "|---|---|---|---|"]
    for m in METRICS.values():
        what = m.doc.replace("|", "\\|") + (" (signed)" if m.signed else "")
        lines.append(f"| `{m.name}` | {m.unit or '-'} | {m.kind} | {what} |")
    return lines + [""]


def main(argv=None) -> int:
    """``python -m sim.output.apidoc``: write docs/api.md (``--check``: exit 1 if it is stale)."""
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        return 0 if DOC.read_text(encoding="utf-8") == text else 1
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
