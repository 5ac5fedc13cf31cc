"""Workloads: Python files written against the tensor API, one per experiment.

A workload file (``experiments/*.py`` or a user's own file) defines:

``EXPERIMENT``   the experiment name its rows carry (default: the file name);
``VARIANTS``     the variant names (default: ``("default",)``);
``PARAMS``       parameters with defaults, overridable with ``--set KEY=VALUE``
                 (the default's type is the parameter's type);
``run(sim, variant, **params)``
                 a generator: the program, yielding ``sim.sample(...)`` /
                 ``sim.tick()`` where the real program would print or sync.

Optional: ``DESCRIPTION`` (one line), ``POSITIVE`` (names of parameters that
must be > 0; by default every int parameter), ``CHOICES`` (parameter name -> its
allowed values, e.g. ``{"optimizer": ("sgd", "adam")}``: a value outside them is
an error, and ``sim sweep --set optimizer=sgd,adam`` makes it a grid axis), ``MEASURED`` (experiment names
in the measured data this workload predicts, default ``(EXPERIMENT,)``),
``SWEEP`` (False keeps a workload out of ``sim sweep``'s default set, e.g. the
replicas of the Linux probes; it still runs when named).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError
from .userfile import exec_user_file

__all__ = ["Workload", "load_workload", "builtin_names", "EXPERIMENTS_DIR", "parse_sets"]

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"


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
        return params


def _convert(key, text, default):
    if not isinstance(text, str):
        return text
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            return int(text.replace("_", ""))
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__
        raise UserError(f"--set {key}={text}: not a valid {kind}") from None
    return text


def parse_sets(items) -> dict:
    """``["KEY=V", ...]`` -> dict; one clear error for a malformed item."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UserError(f"--set {item}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise UserError(f"--set {item}: empty parameter name")
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
    key = str(path)
    if key in _CACHE:
        return _CACHE[key]
    if str(EXPERIMENTS_DIR) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS_DIR))
    module = exec_user_file(path, "_sim_workload")
    run = getattr(module, "run", None)
    if not callable(run):
        raise UserError(f"{path}: a workload file must define run(sim, variant, **params)")
    params = dict(getattr(module, "PARAMS", {}))
    positive = tuple(getattr(module, "POSITIVE",
                             [k for k, v in params.items()
                              if isinstance(v, int) and not isinstance(v, bool)]))
    name = getattr(module, "EXPERIMENT", path.stem.replace("_", "-"))
    workload = Workload(
        name=name,
        path=path,
        variants=tuple(getattr(module, "VARIANTS", ("default",))),
        params=params,
        run=run,
        description=getattr(module, "DESCRIPTION", (module.__doc__ or "").strip().split("\n")[0]),
        positive=positive,
        measured=tuple(getattr(module, "MEASURED", (name,))),
        sweep=bool(getattr(module, "SWEEP", True)),
        choices={k: tuple(v) for k, v in dict(getattr(module, "CHOICES", {})).items()},
    )
    for param, allowed in workload.choices.items():
        if param not in params or params[param] not in allowed:
            raise UserError(f"{path}: CHOICES names '{param}', which is not a parameter "
                            f"or whose default is not one of its choices")
    _CACHE[key] = workload
    return workload
