"""Which parts of a policy a run consulted, and whether another policy would have run the same.

A policy acts only through its attributes: the simulated burn calls its seams and hooks
(``sim.policy.after_backward(...)``) and reads its flags (``moves_operands``). A run
under policy ``A`` that never consulted anything policy ``B`` defines differently is,
step by step, the run ``B`` would have: every method it called is the same function,
every flag it read the same object, and both objects started from the same
``__init__``. :func:`traced` gives ``A`` a subclass that records each attribute name
the run reads from the policy (the first read only: the value is then cached on the
instance, so a seam called a million times costs nothing more), and
:func:`same_behaviour` decides from those names whether ``B``'s run would be identical.
``sim sweep`` uses it to give a cell whose policy could not have changed anything the
rows of the cell it is equivalent to (``--no-reuse`` simulates every cell).

The comparison is by identity, never by value or by what a method would do: a policy
that overrides a seam the run called is simulated, even if its override would have done
the same thing there. Reading the policy's *name* (``Simulation.policy_name``, a
workload choosing its rows by the policy) makes a run specific to its policy.

Examples
--------
>>> from sim.policies import POLICIES
>>> base, dedup = POLICIES["burn-0.22.1"], POLICIES["dedup-sweep"]
>>> same_behaviour({"register_untracked", "on_register"}, base, dedup)
True
>>> same_behaviour({"after_backward", "cleanup_orphaned_entries"}, base, dedup)  # its seam
False
"""

from __future__ import annotations

__all__ = ["traced", "same_behaviour", "NAME_READ"]

#: recorded when the run read the policy's name: its rows may depend on which policy it is
NAME_READ = "@name"

_MISSING = object()


class _Record:
    """A class attribute of a traced policy: its first read through an instance is
    recorded in the instance's ``_policy_reads`` and the value (a bound method, a flag)
    is then kept in the instance's ``__dict__``, which later reads find first."""

    __slots__ = ("name", "value")

    def __init__(self, name, value):
        self.name = name
        self.value = value

    def __get__(self, obj, owner=None):
        value = self.value
        if obj is None:
            # read through the class (``cls.ff_horizon``): the plain attribute
            return value.__get__(None, owner) if hasattr(value, "__get__") else value
        obj.__dict__["_policy_reads"].add(self.name)
        if isinstance(value, property):
            return value.__get__(obj, owner)      # computed at every read: not kept
        if hasattr(value, "__get__"):
            value = value.__get__(obj, owner)
        obj.__dict__[self.name] = value
        return value


def traced(cls, reads: set):
    """A subclass of the policy class ``cls`` whose instances add to ``reads`` the name of
    every attribute of ``cls`` they are asked for (``__init__`` always: it runs)."""
    attrs = {}
    for klass in reversed(cls.__mro__[:-1]):       # object's own attributes are not a policy's
        for name, value in vars(klass).items():
            if name.startswith("__") and name.endswith("__"):
                continue
            attrs[name] = value
    body = {name: _Record(name, value) for name, value in attrs.items()}
    base_init = cls.__init__

    def __init__(self, sim):
        self.__dict__["_policy_reads"] = reads
        reads.add("__init__")
        base_init(self, sim)

    def __getattr__(self, name):
        # an attribute the class does not have (``getattr(policy, name, default)``): a
        # policy that has it would be asked too
        if not (name.startswith("__") and name.endswith("__")):
            self.__dict__["_policy_reads"].add(name)
        raise AttributeError(f"{type(self).__name__!r} policy has no attribute {name!r}")

    body["__init__"] = __init__
    body["__getattr__"] = __getattr__
    body["__module__"] = cls.__module__
    body["__qualname__"] = cls.__qualname__
    body["__doc__"] = cls.__doc__
    return type(cls.__name__, (cls,), body)


def _defined(cls, name):
    """``(the attribute of cls named name, the MRO from the class that defines it)``."""
    mro = cls.__mro__
    for i, klass in enumerate(mro):
        if name in vars(klass):
            return vars(klass)[name], mro[i:]
    return _MISSING, ()


def may_share(a, b) -> bool:
    """Whether a run under policy class ``a`` can be the run ``b`` would give, as far as
    is known before it runs: :func:`same_behaviour` asks every run that ``__init__``
    resolve alike in both, so where it does not (the pytorch policy, a policy file),
    ``b``'s cells need not wait for ``a``'s."""
    if a is b:
        return True
    value_a, mro_a = _defined(a, "__init__")
    value_b, mro_b = _defined(b, "__init__")
    return value_a is value_b and mro_a == mro_b


def same_behaviour(reads, a, b) -> bool:
    """Whether a run under policy class ``a`` that read the attribute names ``reads`` is the
    run policy class ``b`` would give: neither reads the policy's name, and each name read
    (and ``__init__``) resolves in both to the same object, defined in a class from which
    on both have the same ancestors (so that ``super()`` calls inside it meet the same
    methods too). Attributes set on the instance and defined by neither class resolve
    alike."""
    if a is b:
        return True
    if NAME_READ in reads:
        return False
    for name in set(reads) | {"__init__"}:
        value_a, mro_a = _defined(a, name)
        value_b, mro_b = _defined(b, name)
        if value_a is not value_b or mro_a != mro_b:
            return False
    return True
