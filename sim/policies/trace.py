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
``sim sweep`` (and ``sim run``, whose variants x policies are the sweep's cells) uses it
to give a cell whose policy could not have changed anything the rows of the cell it is
equivalent to (``--no-reuse`` simulates every cell).

A policy also acts through the mirror classes it gives the simulation
(:mod:`sim.policies.mirror`): the traced policy hands out a subclass of each that records
``Class.method`` the first time the run calls a method of it (``GraphCleaner.__init__``
when it builds one), and the comparison resolves that method in both policies' classes.

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
>>> same_behaviour({"after_backward", "GraphCleaner.__init__"}, base, dedup)
True
>>> same_behaviour({"GraphCleaner.cleanup_orphaned_entries"}, base, dedup)  # its method
False
"""

from __future__ import annotations

from .mirror import MIRROR

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
            # read through the class (``cls.may_compact``): the plain attribute
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
    body = {name: (_traced_mirror(value, name, reads) if name in MIRROR else _Record(name, value))
            for name, value in attrs.items()}
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


def _traced_mirror(cls, attr, reads):
    """A subclass of the mirror class ``cls`` (the policy's attribute ``attr``) that adds
    ``attr.method`` to ``reads`` at the first call of each of its methods (``__init__``
    included), then gets out of the way: the recording wrapper deletes itself, so later
    calls find the class's own method."""
    body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__}
    if "__slots__" in vars(cls) or all("__slots__" in vars(k) for k in cls.__mro__[:-1]):
        body["__slots__"] = ()
    names = {name for klass in cls.__mro__[:-1] for name, value in vars(klass).items()
             if (name == "__init__" or not name.startswith("__"))
             and type(value).__name__ == "function"}
    traced_cls = type(cls.__name__, (cls,), body)
    for name in names:
        setattr(traced_cls, name, _first_call(traced_cls, name, f"{attr}.{name}", reads))
    return traced_cls


def _first_call(owner, name, label, reads):
    """The method ``name`` of ``owner``, recording ``label`` in ``reads`` at its first call."""
    def record(self, *args, **kwargs):
        if name in vars(owner):
            delattr(owner, name)
            reads.add(label)
        return getattr(super(owner, self), name)(*args, **kwargs)
    return record


def _defined(cls, name):
    """``(the attribute of cls named name, the MRO from the class that defines it)``."""
    mro = cls.__mro__
    for i, klass in enumerate(mro):
        if name in vars(klass):
            return vars(klass)[name], mro[i:]
    return _MISSING, ()


#: what every run reads: the policy's constructor and its client's (the simulation builds
#: both before the workload starts)
ALWAYS = ("__init__", "GraphMutexClient.__init__")


def _alike(a, b, name) -> bool:
    """Whether ``name`` (a policy attribute, or ``Class.method`` of a mirror class) resolves
    in policy classes ``a`` and ``b`` to the same object, defined in a class from which on
    both have the same ancestors."""
    if "." in name:
        attr, name = name.split(".", 1)
        a, b = getattr(a, attr), getattr(b, attr)
    value_a, mro_a = _defined(a, name)
    value_b, mro_b = _defined(b, name)
    return value_a is value_b and mro_a == mro_b


def may_share(a, b) -> bool:
    """Whether a run under policy class ``a`` can be the run ``b`` would give, as far as
    is known before it runs: :func:`same_behaviour` asks every run that the constructors
    of the policy and of its client (:data:`ALWAYS`) resolve alike in both, so where they
    do not (the pytorch policy, drop-release, a policy file), ``b``'s cells need not wait
    for ``a``'s."""
    return a is b or all(_alike(a, b, name) for name in ALWAYS)


def same_behaviour(reads, a, b) -> bool:
    """Whether a run under policy class ``a`` that read the attribute names ``reads`` is the
    run policy class ``b`` would give: neither reads the policy's name, and each name read
    (and those of :data:`ALWAYS`) resolves in both to the same object, defined in a class
    from which on both have the same ancestors (so that ``super()`` calls inside it meet
    the same methods too); a name ``Class.method`` is a method of the policy's mirror class
    (:mod:`sim.policies.mirror`). Attributes set on the instance and defined by neither
    class resolve alike."""
    if a is b:
        return True
    if NAME_READ in reads:
        return False
    return all(_alike(a, b, name) for name in set(reads) | set(ALWAYS))
