"""Bookkeeping policies: burn's behaviour, its history, and candidate fixes.

A policy is a small, named variation of the simulated bookkeeping. The mirror
of burn (``sim.burn``) calls the policy at the few seams where a fix would
change burn's code, and the default of each seam is burn 0.22.1's behaviour:

==============================  ====================================================
seam                            where it is in burn 0.22.1
==============================  ====================================================
``register_untracked``          ``ops/base.rs`` UnTracked ``finish``: register an
                                ``UntrackedOpsStep`` (``GraphMutexClient::register``)
``after_backward``              ``GraphMutexClient::backward``: then
                                ``GraphCleaner::cleanup_orphaned_entries``
``cleanup_orphaned_entries``    ``runtime/graph.rs`` ``GraphCleaner``: clone the
                                locator's map, visit every entry (``maybe_useful``)
``detach``                      ``ops/tensor.rs`` ``float_detach``: a new leaf that
                                keeps ``require_grad``
``on_last_handle``              nothing (``AutodiffTensor`` has no ``Drop``)
``on_register``                 nothing (no sweep outside backward)
``rates``                       the inner backend's compute rates
``in_place``                    burn-flex ``binary_op_typed``/``scalar_op_typed``:
                                write into a uniquely owned operand
``sgd_update``                  burn-optim ``sgd.rs``: ``tensor - grad * lr``
``adam_update``                 burn-optim ``adam.rs``: moments, bias correction,
                                ``tensor - lr * m1 / (sqrt(m2) + eps)``
``may_compact``                 (simulator only) exact mode may keep dead
                                single-node graphs as run records
==============================  ====================================================

Each policy lives in its own module and overrides only its seam(s).

A fix that changes what one of burn's methods does is written as the PR would write it:
a subclass of the mirror class (``GraphMutexClient``, ``GraphLocator``, ``GraphCleaner``,
``AutodiffServer``, ``GraphMemoryManagement``) whose overriding method is the patched
method, named by the policy (``GraphCleaner = DedupCleaner``); the simulation builds its
burn objects from the policy's classes (:mod:`sim.policies.mirror`). ``dedup-sweep``
(``GraphCleaner.cleanup_orphaned_entries``), ``periodic-sweep``
(``GraphMutexClient.register``) and ``drop-release`` (``GraphMutexClient.release``,
``GraphMemoryManagement.on_last_handle`` and ``_remove``) are written so;
``skip-untracked`` (a ``CheckpointStrategy`` method in its PR: the mirror keeps the
strategy as a name), ``detach-constant`` and ``burn-0.20-pre.1`` change seams.

A user's fix is a policy too: a ``.py`` file defining one subclass of
:class:`Policy` with its own ``name`` (``--policy path/to/fix.py`` wherever a
policy is named; :func:`load_policy_file`). Its class is used as written. A policy
that keeps state of its own (a counter, a list of ids, an index of nodes) keeps it in
fields of the policy object or of its replaced client or locator: fast-forward records
what an iteration's seams do to them and replays it (:mod:`sim.engine.fastforward.seams`);
no policy tells fast-forward anything, nor knows what shape a loop has.

Policies compose: ``a+b`` (any number of them) is the policy that applies every one
of them, seam by seam and mirror method by mirror method (:mod:`sim.policies.compose`),
or one error naming the seam or the method two of them both replace.

A mistake that would otherwise make a fix silently do nothing is an error: a public
method whose name is a near miss of a seam's or hook's (``after_backwards``: nothing
would ever call it; a helper of the policy's own starts with ``_`` or has a name of its
own).
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
from pathlib import Path

from ..errors import UserError, shown
from ..userfile import describe_raise, exec_user_file
from .base import Policy
from .mirror import MIRROR, replaced
from .burn_0_20_pre1 import Burn020Pre1
from .skip_untracked import SkipUntracked
from .drop_release import DropRelease
from .detach_constant import DetachConstant
from .dedup_sweep import DedupSweep
from .periodic_sweep import PeriodicSweep
from .pytorch import PyTorch

__all__ = ["Policy", "POLICIES", "SEAMS", "HOOKS", "MIRROR", "replaced", "get_policy", "policy_names",
           "load_policy_file", "policy_file", "policy_sources", "policy_rank", "known_policy",
           "reference_label", "policy_label", "is_fix"]

#: the seams a policy overrides, each with where it is in burn 0.22.1 (the table above,
#: one line each; `sim policies` prints it)
SEAMS = {
    "register_untracked": "ops/base.rs UnTracked finish: register an UntrackedOpsStep "
                          "(GraphMutexClient::register)",
    "after_backward": "GraphMutexClient::backward: then GraphCleaner::cleanup_orphaned_entries",
    "cleanup_orphaned_entries": "runtime/graph.rs GraphCleaner::cleanup_orphaned_entries: "
                                "clone the locator's map, visit every entry (maybe_useful)",
    "detach": "ops/tensor.rs float_detach: a new leaf that keeps require_grad",
    "on_last_handle": "nothing (AutodiffTensor has no Drop)",
    "on_register": "nothing (no sweep outside backward)",
    "rates": "the inner backend's compute rates",
    "in_place": "burn-flex binary_op_typed/scalar_op_typed: write into a uniquely owned "
                "operand",
    "sgd_update": "burn-optim sgd.rs: tensor - grad * lr",
    "adam_update": "burn-optim adam.rs: moments, bias correction, "
                   "tensor - lr * m1 / (sqrt(m2) + eps)",
    "may_compact": "(simulator only) exact mode may keep dead single-node graphs as run "
                   "records",
}

#: further methods a policy may override: its own bookkeeping
HOOKS = {
    "on_node_removed": "a node left a graph's nodes map (a policy's own index of nodes)",
    "first_backward": "the process's first backward: lazy global state, one-time warm-up",
}

POLICIES = {cls.name: cls for cls in (
    Policy, Burn020Pre1, SkipUntracked, DropRelease, DetachConstant, DedupSweep,
    PeriodicSweep, PyTorch,
)}


#: policies loaded from files in this process: name -> (class, resolved path)
_FILES = {}

#: policies composed in this process (``a+b``): name -> (class, the spec that makes it)
_COMPOSED = {}

#: what a policy name may contain (it names rows, cache entries and figure legends)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

#: how alike (difflib ratio) a method's name and a seam's must be for the method to be
#: taken for a misspelt seam: typos score 0.89 and more, helpers' names such as
#: ``count_backwards``, ``update`` or ``reset`` 0.75 and less
_NEAR_MISS = 0.8


def policy_names():
    """The built-in policies' names, in the registry's order."""
    return list(POLICIES)


def get_policy(name):
    """The policy class called ``name``, the one defined in the ``.py`` file ``name``, or
    the composition ``a+b`` of policies named either way (:mod:`sim.policies.compose`)."""
    text = str(name)
    cls = POLICIES.get(text)
    if cls is None and text in _FILES:
        cls = _FILES[text][0]
    if cls is None and text in _COMPOSED:
        cls = _COMPOSED[text][0]
    if cls is None and text.endswith(".py") and ("+" not in text or Path(text).is_file()):
        cls = load_policy_file(text)
    if cls is None and "+" in text:
        cls = _composed(text)
    if cls is None:
        raise UserError(f"unknown policy '{text}' (valid: {', '.join(POLICIES)}, "
                        f"a path to a .py file defining one, or several joined by '+')")
    return cls


def _composed(text):
    """The composition of the policies ``text`` names, joined by ``+``; registered under
    its members' names joined the same way."""
    from .compose import compose
    parts = text.split("+")
    if not all(parts):
        raise UserError(f"policy '{text}': an empty name between '+'")
    classes = [get_policy(part) for part in parts]
    name = "+".join(cls.name for cls in classes)
    if name not in _COMPOSED:
        spec = "+".join(policy_file(cls.name) or cls.name for cls in classes)
        _COMPOSED[name] = (compose(classes, [*SEAMS, *HOOKS]), spec)
    return _COMPOSED[name][0]


def known_policy(name):
    """The class of a built-in policy or of a composition of built-ins named ``name``
    (composed on demand), or None (a file policy, or a name no policy has)."""
    if name in POLICIES:
        return POLICIES[name]
    if "+" in name and all(part in POLICIES for part in name.split("+")):
        try:
            return get_policy(name)
        except UserError:
            return None
    return None


def reference_label(name):
    """How tables and figures label policy ``name`` if it models another framework
    (``"reference (PyTorch)"``), else None: such a policy is shown apart from the fixes,
    as a reference, never as a fix candidate.

    >>> reference_label("pytorch"), reference_label("dedup-sweep")
    ('reference (PyTorch)', None)
    """
    cls = known_policy(name) or (_FILES.get(name) or (None,))[0]
    return getattr(cls, "reference", None) if cls is not None else None


def policy_label(name) -> str:
    """The name tables and figures give policy ``name``: its :func:`reference_label`, or
    its name.

    >>> policy_label("pytorch"), policy_label("dedup-sweep")
    ('reference (PyTorch)', 'dedup-sweep')
    """
    return reference_label(name) or name


def is_fix(name, reference="burn-0.22.1") -> bool:
    """Whether policy ``name`` is a candidate fix: neither the ``reference`` every fix
    changes nor a reference framework (:func:`reference_label`)."""
    return name != reference and reference_label(name) is None


def policy_file(name):
    """The file a policy loaded from a file came from (a ``str``), or None for a built-in.
    For a composition with a file policy among its members, the spec that makes it again
    in a fresh process (its members' files and names joined by ``+``)."""
    entry = _FILES.get(name)
    if entry:
        return entry[1]
    entry = _COMPOSED.get(name)
    if entry and any(policy_file(part) for part in entry[0].members):
        return entry[1]
    return None


def policy_sources(name) -> list:
    """The files the policy ``name`` is defined in: its own, or its members' (a
    composition); empty for built-ins."""
    entry = _FILES.get(name)
    if entry:
        return [entry[1]]
    entry = _COMPOSED.get(name)
    if entry:
        return [path for part in entry[0].members for path in policy_sources(part)]
    return []


def policy_rank(name) -> tuple:
    """Sort key of a policy name: the built-ins in registry order, then file policies in
    the order they were loaded, then compositions in the order they were made, then any
    other name (e.g. read back from old results)."""
    if name in POLICIES:
        return (list(POLICIES).index(name), "")
    if name in _FILES:
        return (len(POLICIES) + list(_FILES).index(name), "")
    if name in _COMPOSED:
        return (len(POLICIES) + len(_FILES) + list(_COMPOSED).index(name), "")
    return (len(POLICIES) + len(_FILES) + len(_COMPOSED), name)


def load_policy_file(path):
    """Load the policy a user's file defines and register it under its ``name``.

    The file defines exactly one subclass of :class:`Policy` (or names the one to
    use as ``POLICY``) with a ``name`` of its own; ``changes`` and ``expected``
    describe it as the built-ins' do (the class docstring stands in for ``changes``).
    Loading the same file again returns the same class. Any problem is a
    :class:`~sim.errors.UserError` naming the file: a public method named like a
    misspelt seam among them (:func:`_check_seam_names`).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such policy file")
    path = path.resolve()
    for cls, where in _FILES.values():
        if where == str(path):
            return cls
    module = exec_user_file(path, "_sim_policy")
    module_name = module.__name__
    cls = getattr(module, "POLICY", None)
    if cls is None:
        found = [c for c in vars(module).values() if isinstance(c, type)
                 and issubclass(c, Policy) and c.__module__ == module_name]
        if len(found) != 1:
            what = ("no subclass of sim.policies.Policy" if not found else
                    f"{len(found)} policies ({', '.join(c.__name__ for c in found)}): "
                    f"set POLICY to the one to use")
            raise UserError(f"{path}: a policy file must define one subclass of "
                            f"sim.policies.Policy; it defines {what}")
        cls = found[0]
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise UserError(f"{path}: POLICY must be a subclass of sim.policies.Policy")
    own = [c for c in cls.__mro__ if c.__module__ == module_name]
    name = cls.name if any("name" in vars(c) for c in own) else None
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UserError(f"{path}: {cls.__name__} must set name = '...' (letters, digits, "
                        f"'.', '_', '+', '-'), a name of its own")
    if name in POLICIES:
        raise UserError(f"{path}: policy name '{name}' is a built-in policy's; "
                        f"give yours a name of its own")
    if name in _FILES:
        raise UserError(f"{path}: policy name '{name}' is already taken by {_FILES[name][1]}")
    _check_seam_names(cls, own, path)
    _check_mirror_classes(cls, path)
    _check_seam_signatures(own, path)
    extra = {"__module__": module_name}
    if not any("changes" in vars(c) for c in own):
        doc = (cls.__doc__ or "").strip().split("\n")[0]
        extra["changes"] = doc or f"(no description: {path.name} sets no changes text)"
    if not any("expected" in vars(c) for c in own):
        extra["expected"] = "(not stated)"
    extra["__init__"] = _reporting_init(cls.__init__, str(path), name)
    extra["__doc__"] = cls.__doc__
    extra["__qualname__"] = cls.__qualname__
    cls = type(cls.__name__, (cls,), extra)
    _FILES[name] = (cls, str(path))
    return cls


def _check_seam_names(cls, own, path) -> None:
    """Raise :class:`~sim.errors.UserError` if a class in ``own`` (the classes of policy
    ``cls`` that the file ``path`` defines) has a public method that overrides nothing
    and whose name is a near miss of a seam's or hook's (:data:`SEAMS`, :data:`HOOKS`):
    no one would ever call it, so the fix it holds would silently do nothing.

    A method whose name starts with ``_``, or is unlike every seam's, is the policy's own
    helper; one that a base class from outside the file defines (``Policy``'s own
    ``describe``, a built-in's ``release_deferred``) overrides it.

    >>> class Fix(Policy):
    ...     def after_backwards(self, client): pass
    >>> _check_seam_names(Fix, [Fix], "fix.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sim.errors.UserError: fix.py: Fix.after_backwards is no seam ...: did you mean after_backward? ...
    >>> class Fine(Policy):
    ...     def after_backward(self, client): self._sweep(client); self.count_backwards()
    ...     def _sweep(self, client): pass
    ...     def count_backwards(self): pass
    >>> _check_seam_names(Fine, [Fine], "fix.py")
    """
    inherited = [klass for klass in cls.__mro__ if klass not in own]
    names = list(SEAMS) + list(HOOKS)
    for klass in own:
        for attr, value in vars(klass).items():
            if (attr.startswith("_") or attr in names or not _is_method(value)
                    or any(attr in vars(base) for base in inherited)):
                continue
            near = difflib.get_close_matches(attr.lower(), names, n=1, cutoff=_NEAR_MISS)
            if near:
                raise UserError(f"{_where_defined(klass, attr, path)}: {klass.__name__}.{attr} "
                                f"is no seam or hook of sim.policies.Policy, so nothing calls "
                                f"it: did you mean {near[0]}? (start a helper's name with '_')")


def _check_mirror_classes(cls, path) -> None:
    """Raise :class:`~sim.errors.UserError` if policy ``cls`` (from the file ``path``) gives
    a mirror class attribute (:data:`MIRROR`) that is not a subclass of burn's class: the
    simulation builds its objects from it and calls burn's methods on them.

    >>> class Fix(Policy):
    ...     GraphCleaner = object
    >>> _check_mirror_classes(Fix, "fix.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sim.errors.UserError: fix.py: GraphCleaner = object must be a subclass of ...GraphCleaner ...
    """
    for attr, (base, _) in MIRROR.items():
        value = getattr(cls, attr, base)
        if not (isinstance(value, type) and issubclass(value, base)):
            raise UserError(f"{path}: {attr} = {getattr(value, '__name__', shown(value))} must be "
                            f"a subclass of {base.__module__}.{base.__name__} (the mirror class it "
                            f"replaces)")


def _check_seam_signatures(own, path) -> None:
    """Raise :class:`~sim.errors.UserError` if a class in ``own`` (the policy classes the
    file ``path`` defines) overrides a seam or hook with a method that cannot take the
    arguments the simulator passes it: the engine calls each one with :class:`Policy`'s
    positional parameters, so an override must accept as many (more only with
    defaults, or ``*args``). Without this check the mistake surfaces as a ``TypeError``
    deep in a run, blamed on the workload line that reached the seam.

    >>> class Fix(Policy):
    ...     def after_backward(self): pass
    >>> _check_seam_signatures([Fix], "fix.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sim.errors.UserError: fix.py: Fix.after_backward(self) cannot be called as the seam is, after_backward(self, client): ...
    >>> class Fine(Policy):
    ...     def after_backward(self, client, every=1): pass
    ...     def on_register(self, *args): pass
    >>> _check_seam_signatures([Fine], "fix.py")
    """
    for klass in own:
        for attr, value in vars(klass).items():
            if (attr not in SEAMS and attr not in HOOKS) or not isinstance(
                    value, types.FunctionType):
                continue
            expected = inspect.signature(getattr(Policy, attr))
            given = inspect.signature(value)
            try:
                given.bind(*expected.parameters)
            except TypeError as err:
                raise UserError(
                    f"{_where_defined(klass, attr, path)}: {klass.__name__}.{attr}{_plain(given)} "
                    f"cannot be called as the seam is, {attr}{_plain(expected)}: {err}"
                ) from None


def _plain(signature) -> str:
    """A signature as written without its annotations: ``(self, client, every=1)``."""
    empty = inspect.Signature.empty
    return str(signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=empty))


def _is_method(value) -> bool:
    """Whether a class attribute is a method (a function, static or class method, or a
    property), not a data attribute such as ``name`` or a counter's start value."""
    return isinstance(value, (types.FunctionType, staticmethod, classmethod, property))


def _where_defined(cls, attr, path) -> str:
    """``PATH:LINE`` of the ``def`` of method ``attr`` of ``cls`` (its class or the first
    base that has it) in the file ``path``; ``PATH`` alone if it was defined elsewhere."""
    for klass in cls.__mro__:
        if attr in vars(klass):
            func = vars(klass)[attr]
            func = getattr(func, "__func__", getattr(func, "fget", func))
            code = getattr(func, "__code__", None)
            if code is not None and code.co_filename == str(path):
                return f"{path}:{code.co_firstlineno}"
            break
    return str(path)


def _reporting_init(init, path, name):
    """The constructor of a file policy: ``init`` (its class's own), with an exception it
    raises made one :class:`~sim.errors.UserError` line naming the file and line, as an
    exception raised in one of its seams is (:func:`sim.engine.runner.run_cell`)."""
    def __init__(self, sim):
        try:
            init(self, sim)
        except UserError:
            raise
        except Exception as exc:  # the user's constructor (or a seam it calls) raised
            raise UserError(describe_raise(exc, path, f"policy {name}")) from None
    __init__.__wrapped__ = init
    return __init__
