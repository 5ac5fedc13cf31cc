"""Workloads: Python files written against the tensor API, one per experiment.

A workload file (``experiments/*.py`` or a user's own file) defines:

``EXPERIMENT``   the experiment name its rows carry (default: the file name);
``VARIANTS``     the variant names (default: ``("default",)``);
``PARAMS``       parameters with defaults, overridable with ``--set KEY=VALUE``
                 (the default's type -- int, float, bool or str -- is the
                 parameter's type; an int may be given as ``1_000_000`` or
                 ``1e6``; a float given must be finite);
``run(sim, variant, **params)``
                 a generator: the program, yielding ``sim.sample(...)`` /
                 ``sim.tick()`` where the real program would print or sync.

Optional: ``DESCRIPTION`` (one line), ``POSITIVE`` (names of numeric parameters
that must be > 0; by default every int parameter), ``CHOICES`` (parameter name -> its
allowed values, e.g. ``{"optimizer": ("sgd", "adam")}``: a value outside them is
an error, and ``sim sweep --set optimizer=sgd,adam`` makes it a grid axis), ``MEASURED`` (experiment names
in the measured data this workload predicts, default ``(EXPERIMENT,)``),
``SWEEP`` (False keeps a workload out of ``sim sweep``'s default set, e.g. the
replicas of the Linux probes; it still runs when named), ``X_UNITS`` (experiment ->
the ``x_unit`` its rows are sampled in, or a dict phase -> x_unit, e.g.
``{"train-validate": {"train": "step", "generate": "samples"}}``: a measured row in
another unit is an error before anything runs, and a run that samples in another unit
is an error in the workload file), ``check(variant, **params)`` (raises
:class:`~sim.errors.UserError` for a combination of parameters ``run`` would refuse:
called for every cell of a sweep before any runs, e.g. a report step beyond ``steps``),
``QUICK`` (parameter name -> value: the parameters the Linux probe the workload
replicates runs with under ``sim measure --quick``, whose loop counts are cut ~10x;
``sim compare`` simulates rows measured in quick mode with them).

Every one of these is checked when the file is loaded (:func:`_load`): a constant of
the wrong type (``VARIANTS = "abc"``, ``PARAMS = 5``, a ``POSITIVE`` name that is
not a numeric parameter, ...) or a ``run`` that cannot take ``sim, variant`` and
every ``PARAMS`` name as keyword arguments is one error naming the file and the
constant, not a traceback later.
"""

from __future__ import annotations

import decimal
import inspect
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError, shown
from ..userfile import exec_user_file
from ..paths import EXPERIMENTS

__all__ = ["Workload", "load_workload", "builtin_names", "EXPERIMENTS_DIR", "parse_sets"]

EXPERIMENTS_DIR = EXPERIMENTS


@dataclass
class Workload:
    """A loaded workload file."""

    name: str
    path: Path
    variants: tuple
    params: dict
    run: object
    description: str = ""
    positive: tuple = ()
    measured: tuple = field(default_factory=tuple)
    sweep: bool = True
    choices: dict = field(default_factory=dict)
    x_units: dict = field(default_factory=dict)
    check: object = None
    quick: dict = field(default_factory=dict)

    def x_unit(self, experiment, phase=""):
        """The ``x_unit`` the file declares (``X_UNITS``) for rows of ``experiment`` in
        ``phase``, or None where it declares none."""
        unit = self.x_units.get(experiment)
        return unit.get(phase or "") if isinstance(unit, dict) else unit

    def check_x_units(self, rows) -> None:
        """A row the run sampled in another ``x_unit`` than ``X_UNITS`` declares is an
        error in the workload file (its declaration is what measured rows are checked
        against before a run)."""
        for row in rows:
            declared = self.x_unit(row["experiment"], row.get("phase", ""))
            if declared is not None and row["x_unit"] != declared:
                phase = f" phase '{row['phase']}'" if row.get("phase") else ""
                raise UserError(f"{self.path}: X_UNITS declares x_unit '{declared}' for "
                                f"{row['experiment']}{phase}, but run() sampled it in "
                                f"'{row['x_unit']}'")

    def resolve(self, variant=None, sets=None) -> dict:
        """Parameters after applying ``sets`` (name -> string value); checks the variant."""
        if variant is not None and variant not in self.variants:
            raise UserError(f"unknown variant '{variant}' of {self.name} "
                            f"(valid: {', '.join(self.variants)})")
        params = dict(self.params)
        for key, text in (sets or {}).items():
            if key not in params:
                raise UserError(f"--set {key}: {self.name} has no parameter '{key}' "
                                f"(valid: {', '.join(params) or 'none'})")
            params[key] = _convert(key, text, params[key])
            allowed = self.choices.get(key)
            if allowed is not None and params[key] not in allowed:
                raise UserError(f"--set {key}={text}: expected one of "
                                f"{', '.join(map(str, allowed))}")
        for key in self.positive:
            value = params[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise UserError(f"--set {key}={value}: must be > 0")
        if variant is not None and self.check is not None:
            self.check(variant, **params)   # the whole combination: a cell's parameters
        return params


def _whole(key, text) -> int:
    """``text`` as an int: digits (``_`` separators allowed) or a whole number in exponent
    notation, read as a decimal (``1e30`` is 10**30 exactly, not a float's neighbour)."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        pass
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise ValueError(text) from None
    if not value.is_finite() or value.adjusted() > 4300:    # int()'s own digit limit
        raise ValueError(text)
    if value != value.to_integral_value():
        raise UserError(f"--set {key}={text}: not a valid int (a whole number: 1000000, "
                        f"1_000_000 or 1e6)")
    return int(value)


def _convert(key, text, default):
    """``text`` (a ``--set`` value) as the type of the parameter's ``default``.

    A bool takes true/false/1/0, an int may hold ``_`` separators or be a whole number
    in exponent notation (``1e6``, read exactly), a float must be finite (``nan``/``inf``
    are errors); a str is taken as is, a non-string ``text`` (a value from Python, not the
    command line) is returned unchanged.

    >>> _convert("lr", "1e-3", 0.1), _convert("steps", "2_000", 1), _convert("f", "0", True)
    (0.001, 2000, False)
    >>> _convert("iterations", "1e6", 1), _convert("iterations", "2.5e3", 1)
    (1000000, 2500)
    >>> _convert("lr", "nan", 0.1)
    Traceback (most recent call last):
    sim.errors.UserError: --set lr=nan: not a finite number
    >>> _convert("iterations", "1.5", 1)
    Traceback (most recent call last):
    sim.errors.UserError: --set iterations=1.5: not a valid int (a whole number: 1000000, 1_000_000 or 1e6)
    """
    if not isinstance(text, str):
        return text
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            return _whole(key, text)
        if isinstance(default, float):
            value = float(text)
            if not math.isfinite(value):
                raise UserError(f"--set {key}={text}: not a finite number")
            return value
    except ValueError:
        kind = type(default).__name__
        raise UserError(f"--set {key}={text}: not a valid {kind}") from None
    return text


def parse_sets(items) -> dict:
    """``["KEY=V", ...]`` -> dict; one clear error for a malformed item or a key given
    twice (``sim run``'s overrides set each parameter once; ``sim sweep``'s grid, where
    repeating a key adds values, parses one item at a time: :func:`sim.commands.sweep.parse_grid`).

    >>> parse_sets(["steps=60", " lr = 1e-3"])
    {'steps': '60', 'lr': '1e-3'}
    >>> parse_sets(["k=1", "k=2"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sim.errors.UserError: --set k=2: parameter 'k' is already set (--set k=1); ...
    """
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UserError(f"--set {item}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise UserError(f"--set {item}: empty parameter name")
        if key in out:
            raise UserError(f"--set {item.strip()}: parameter '{key}' is already set "
                            f"(--set {key}={out[key]}); give each parameter once")
        out[key] = value.strip()
    return out


def builtin_names():
    """Names of the workloads shipped in ``experiments/``."""
    names = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.py")):
        if path.stem.startswith("_") or path.stem == "common":
            continue
        names.append(_load(path).name)
    return names


_CACHE = {}


def _first_sentence(doc) -> str:
    """A workload file's description where it sets no ``DESCRIPTION``: its docstring's
    first sentence (to the first full stop that ends a line or is followed by a space,
    within its first paragraph), on one line."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"\.(\s|$)", paragraph)
    return paragraph[:end.start() + 1] if end else paragraph


def load_workload(name_or_path) -> Workload:
    """A workload by built-in name (``adleak-rss``) or by path to a ``.py`` file."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix == ".py":
        if not path.exists():
            raise UserError(f"{text}: no such workload file")
        return _load(path.resolve())
    for candidate in sorted(EXPERIMENTS_DIR.glob("*.py")):
        if candidate.stem.startswith("_") or candidate.stem == "common":
            continue
        workload = _load(candidate)
        if workload.name == text:
            return workload
    raise UserError(f"unknown workload '{text}' (valid: {', '.join(builtin_names())}, "
                    f"or a path to a .py file)")


def _load(path: Path) -> Workload:
    """The workload of the file ``path`` (cached by path), its constants checked."""
    key = str(path)
    if key in _CACHE:
        return _CACHE[key]
    if str(EXPERIMENTS_DIR) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS_DIR))
    module = exec_user_file(path, "_sim_workload")
    run = getattr(module, "run", None)
    if not callable(run):
        raise UserError(f"{path}: a workload file must define run(sim, variant, **params)")
    params = _params(path, module)
    name = _constant(path, module, "EXPERIMENT", path.stem.replace("_", "-"), _is_name,
                     "a non-empty string")
    if path.parent != EXPERIMENTS_DIR and name in builtin_names():
        # its rows would carry the built-in's name: labelled as the built-in's in a run,
        # checked against the built-in's measured data in a sweep
        given = "EXPERIMENT" if hasattr(module, "EXPERIMENT") else "its file name"
        raise UserError(f"{path}: the experiment name '{name}' ({given}) is the built-in "
                        f"workload {name}'s: give the file an EXPERIMENT of its own")
    workload = Workload(
        name=name,
        path=path,
        variants=_names(path, module, "VARIANTS", ("default",), "variant", distinct=True),
        params=params,
        run=run,
        description=_constant(path, module, "DESCRIPTION",
                              _first_sentence(module.__doc__),
                              lambda v: isinstance(v, str), "a string (one line)"),
        positive=_positive(path, module, params),
        measured=tuple(_strings(path, module, "MEASURED", (name,),
                                "a tuple or list of experiment names")),
        sweep=_constant(path, module, "SWEEP", True, lambda v: isinstance(v, bool),
                        "True or False"),
        choices=_choices(path, module, params),
        x_units=_x_units(path, module),
        check=_constant(path, module, "check", None, lambda v: v is None or callable(v),
                        "a function check(variant, **params)"),
    )
    _check_run(path, run, params)
    workload.quick = _quick(path, module, workload)
    _CACHE[key] = workload
    return workload


#: the types a parameter's default may have (its type is the parameter's type)
PARAM_TYPES = (bool, int, float, str)


def _kind(value) -> str:
    """``TYPE VALUE`` for an error message (the value's repr shortened: :func:`shown`)."""
    return f"{type(value).__name__} {shown(value)}"


def _is_name(value) -> bool:
    """A non-empty string."""
    return isinstance(value, str) and bool(value.strip())


def _is_number(value) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _constant(path, module, name, default, ok, expected):
    """``module.NAME`` (``default`` if the file does not define it), checked by ``ok``:
    otherwise an error naming the file, the constant and what was ``expected``."""
    value = getattr(module, name, default)
    if not ok(value):
        raise UserError(f"{path}: {name} must be {expected}, not {_kind(value)}")
    return value


def _strings(path, module, name, default, expected):
    """``module.NAME`` as a tuple of strings: a tuple or list of them (a bare string is
    an error: it would be read as its characters)."""
    value = getattr(module, name, default)
    if isinstance(value, str):
        raise UserError(f"{path}: {name} must be {expected}, not the string {value!r} "
                        f"(write ({value!r},) for one)")
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{path}: {name} must be {expected}, not {_kind(value)}")
    return tuple(value)


def _names(path, module, name, default, what, distinct=False):
    """``module.NAME`` as a non-empty tuple of non-empty strings (``what`` names)."""
    expected = f"a non-empty tuple or list of {what} names (strings)"
    values = _strings(path, module, name, default, expected)
    if not values or not all(_is_name(v) for v in values):
        raise UserError(f"{path}: {name} must be {expected}, "
                        f"not {_kind(getattr(module, name, default))}")
    if distinct:
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise UserError(f"{path}: {name} names {', '.join(map(repr, repeated))} more "
                            f"than once")
    return values


def _params(path, module) -> dict:
    """``module.PARAMS``: a dict of parameter name (a string) -> default (bool, int,
    float or str)."""
    params = getattr(module, "PARAMS", {})
    if not isinstance(params, dict):
        raise UserError(f"{path}: PARAMS must be a dict of parameter name -> default, "
                        f"not {_kind(params)}")
    for key, value in params.items():
        if not _is_name(key):
            raise UserError(f"{path}: PARAMS: parameter names must be non-empty strings, "
                            f"not {_kind(key)}")
        if not isinstance(value, PARAM_TYPES):
            raise UserError(f"{path}: PARAMS['{key}'] must be an int, float, bool or str "
                            f"(its default sets its type), not {_kind(value)}")
    return dict(params)


def _positive(path, module, params) -> tuple:
    """``module.POSITIVE``: names of numeric parameters that must be > 0 (default:
    every int parameter)."""
    default = tuple(k for k, v in params.items() if _is_number(v) and isinstance(v, int))
    names = _strings(path, module, "POSITIVE", default,
                     "a tuple or list of parameter names")
    for key in names:
        if key not in params or not _is_number(params[key]):
            numeric = [k for k, v in params.items() if _is_number(v)]
            raise UserError(f"{path}: POSITIVE names '{key}', which is not a numeric "
                            f"parameter (numeric PARAMS: {', '.join(numeric) or 'none'})")
    return names


def _choices(path, module, params) -> dict:
    """``module.CHOICES``: parameter name -> tuple of its allowed values (a tuple or
    list holding the parameter's default)."""
    choices = getattr(module, "CHOICES", {})
    if not isinstance(choices, dict):
        raise UserError(f"{path}: CHOICES must be a dict of parameter name -> its allowed "
                        f"values, not {_kind(choices)}")
    out = {}
    for param, allowed in choices.items():
        if param not in params:
            raise UserError(f"{path}: CHOICES names '{param}', which is not a parameter "
                            f"(PARAMS: {', '.join(map(str, params)) or 'none'})")
        if not isinstance(allowed, (tuple, list)) or not allowed:
            raise UserError(f"{path}: CHOICES names '{param}' with {_kind(allowed)}: "
                            f"expected a non-empty tuple or list of its allowed values")
        if params[param] not in allowed:
            raise UserError(f"{path}: CHOICES names '{param}', whose default "
                            f"{params[param]!r} is not one of its choices")
        out[param] = tuple(allowed)
    return out


def _quick(path, module, workload) -> dict:
    """``module.QUICK``: parameter name -> the value the probe's quick mode runs with,
    each a parameter of ``workload`` and a value it accepts (typed as ``--set`` types
    it, checked as ``--set`` checks it)."""
    quick = getattr(module, "QUICK", {})
    if not isinstance(quick, dict):
        raise UserError(f"{path}: QUICK must be a dict of parameter name -> value, "
                        f"not {_kind(quick)}")
    for key in quick:
        if key not in workload.params:
            raise UserError(f"{path}: QUICK names '{key}', which is not a parameter "
                            f"(PARAMS: {', '.join(map(str, workload.params)) or 'none'})")
    try:
        resolved = workload.resolve(None, {k: str(v) for k, v in quick.items()})
        return {key: resolved[key] for key in workload.params if key in quick}
    except UserError as exc:
        raise UserError(f"{path}: QUICK: {exc}") from None


def _x_units(path, module) -> dict:
    """``module.X_UNITS``: experiment name -> x_unit (a string), or -> a dict of phase
    (a string, ``""`` for rows without one) -> x_unit."""
    units = getattr(module, "X_UNITS", {})
    expected = ("a dict of experiment name -> x_unit (a string) or -> a dict of "
                "phase -> x_unit")
    if not isinstance(units, dict):
        raise UserError(f"{path}: X_UNITS must be {expected}, not {_kind(units)}")
    for experiment, unit in units.items():
        phases = unit if isinstance(unit, dict) else {"": unit}
        if not isinstance(experiment, str) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in phases.items()):
            raise UserError(f"{path}: X_UNITS must be {expected}, not "
                            f"{_kind({experiment: unit})} in it")
    return dict(units)


def _check_run(path, run, params) -> None:
    """``run`` accepts ``(sim, variant, **PARAMS)``: a parameter it lacks (or one it
    requires that PARAMS does not declare) is an error at load, not a TypeError mid-run."""
    try:
        signature = inspect.signature(run)
    except (TypeError, ValueError):   # no signature to read (a builtin): checked when it runs
        return
    try:
        signature.bind(None, None, **params)
    except TypeError as exc:
        raise UserError(f"{path}: run{signature} cannot be called as run(sim, variant, "
                        f"**PARAMS): {_mismatch(signature, params) or exc}") from None


def _mismatch(signature, params) -> str:
    """What keeps ``run(sim, variant, **params)`` from binding to ``signature``, in the
    workload's terms ("" when it is not about PARAMS)."""
    kinds = inspect.Parameter
    accepted = [p for p in signature.parameters.values()
                if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)]
    names = {p.name for p in accepted}
    if not any(p.kind == kinds.VAR_KEYWORD for p in signature.parameters.values()):
        lacking = [k for k in params if k not in names]
        if lacking:
            return (f"it has no parameter {', '.join(map(repr, lacking))}, which PARAMS "
                    f"declares")
    positional = list(signature.parameters.values())[:2]
    required = [p.name for p in accepted if p.default is p.empty and p not in positional
                and p.name not in params]
    if required:
        return f"it requires {', '.join(map(repr, required))}, which PARAMS does not declare"
    return ""
