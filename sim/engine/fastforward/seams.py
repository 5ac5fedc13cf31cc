"""Fast-forward of the state a policy keeps for itself: its seams recorded and replayed.

A policy may keep state of its own (``periodic-sweep``'s count of registrations,
``burn-0.20-pre.1``'s list of untracked ids and its table, ``drop-release``'s children
counts and its index of nodes by id, a file policy's counter). Fast-forward learns it
the way it learns the heap: by watching a probed iteration, not by asking the policy.
No policy defines a fast-forward hook or knows what shape a loop has.

What is watched
    The policy's *own fields*: the attributes of the policy object, and of the mirror
    objects it replaces that hold the process's state (its ``GraphMutexClient``, its
    ``GraphLocator``), that burn's classes do not set (:func:`own_fields`). Per-graph
    objects (a replaced ``AutodiffServer`` or ``GraphMemoryManagement``) are mirror
    state, which the closed forms build as they build burn's. Each probed iteration
    compares the fields at its end with their start (:class:`SeamRecord`): integers move
    by a step; lists keep their items and append some, or hold the same items relative to
    the iteration; dicts and sets gain, lose and change entries; a plain object a field
    holds (a hash table) keeps its fields or moves integer ones by a step. Node ids are
    recorded relative to the iteration's first id (those of nodes registered before the
    loop as they are), and a node's ref count as the id it stands for. The change is
    part of the iteration's template: the probed iterations must agree on it as they
    agree on the heap's, and anything else (a float that moved, a list whose items were
    reordered, an object it cannot name relative to the iteration) stands for no other
    iteration (fast-forward stops at once: :func:`horizon` is 0).

The seams are recorded too
    Each call the mirror makes into the policy's code (a seam it overrides, a method of
    its replaced client or locator) is recorded with its arguments, the outermost call
    only (:func:`begin`). Applying ``n`` iterations replays the fields' changes with the
    ids each skipped iteration has (:func:`advance`; ids a closed form put into one
    :class:`~sim.burn.graph.runs.NodeRun` are appended as that run, the way compressed
    runs live inside burn's collections; a ref count is looked up once the closed form
    built its node).

Where the template ends
    A policy acts differently when its state reaches some value (a sweep at the
    65,536th registration, a table that must grow, every 4th backward). Where an
    iteration moves integer fields, :func:`horizon` runs the recorded seam calls of the
    next iteration *dry*: every method of burn's mirror classes (and of the policy's
    per-graph ones) absorbed and recorded instead of run, the heap's events recorded
    instead of made, time charges recorded instead of charged; the policy's fields and the
    simulation's counters restored after. Its record must equal that of a dry run at the
    probed iteration's own state (else the policy acts in the next iteration). In it the
    moving integers are :class:`_Traced`: they keep ``a + b k`` (``k``: iterations
    skipped) through sums, products, ``%`` and ``//`` by constants and record each
    comparison, and :func:`_solve` finds the first ``k`` at which one comes out otherwise
    (a threshold, an equality, a period). Where a traced integer leaves that arithmetic
    (an index, a hash, a bit operation), dry runs at ``k`` one by one up to :data:`LINEAR`,
    then a bisection (a threshold) stand in; a policy acting on a longer period there is
    not seen. The iteration where the policy acts runs exactly, and the loop is probed
    afresh after it.

Not seen: state kept outside the policy's objects (module globals, class attributes),
thresholds on a container's length (keep a counter), and mutations a dry run makes to
objects other than the policy's own fields and the simulation's counters. A probe's copy
of a container keeps its items alive until the iteration ends (a tensor a policy's list
drops in a probed iteration would be freed later than in exact mode; ref counts and node
ids, all the built-in policies keep, free nothing when Python drops them).
"""

from __future__ import annotations

import dis
import math
import types

from ...burn.graph.runs import NodeRun
from ...platform.heap import HeapTap
from ...policies.base import Policy
from ...policies.mirror import MIRROR
from ...policies.trace import _Record

__all__ = ["SeamRecord", "own_fields", "begin", "end", "horizon", "advance", "indexes_nodes",
           "LINEAR"]

#: iterations ahead tried one by one before the bisection (a policy that acts every few
#: iterations: sweep-every-4)
LINEAR = 16

#: the policy's methods that fast-forward may record (the seams and hooks the mirror calls)
_POLICY_ENTRIES = ("register_untracked", "after_backward", "cleanup_orphaned_entries",
                   "detach", "on_last_handle", "on_register", "on_node_removed",
                   "sgd_update", "adam_update", "first_backward")

#: the mirror objects that hold process state besides the policy (per-graph objects are
#: built by the closed forms)
_HOLDERS = ("GraphMutexClient", "GraphLocator")


class _Unreplayable(Exception):
    """A field changed in a way no other iteration can repeat."""


# -- which fields are the policy's own ---------------------------------------------------

_BURN_FIELDS = {}


def _stored_names(cls) -> frozenset:
    """The attribute names burn's class ``cls`` (and its bases) store anywhere in its code:
    fields of burn's, never the policy's own."""
    names = _BURN_FIELDS.get(cls)
    if names is None:
        found = set()
        for klass in cls.__mro__[:-1]:
            for value in vars(klass).values():
                code = getattr(getattr(value, "__func__", value), "__code__", None)
                if code is not None:
                    found.update(i.argval for i in dis.get_instructions(code)
                                 if i.opname == "STORE_ATTR")
            found.update(getattr(klass, "__slots__", ()))
        names = _BURN_FIELDS[cls] = frozenset(found)
    return names


def _fields_of(obj, burn) -> list:
    """``(obj, name)`` of each field of ``obj`` that is not burn's nor a class attribute
    (a traced policy keeps its bound methods and its record of reads on the instance)."""
    cls = type(obj)
    out = []
    for name in vars(obj):
        if name in burn or name == "_policy_reads" or hasattr(cls, name):
            continue
        out.append((obj, name))
    return out


def own_fields(sim) -> list:
    """The policy's own fields: ``(object, attribute name)`` of the policy object's and of
    its replaced client's and locator's fields that burn's classes do not set."""
    policy = sim.policy
    out = _fields_of(policy, {"sim"})
    holders = (sim.client, getattr(sim.client, "locator", None))
    for attr, obj in zip(_HOLDERS, holders):
        base = MIRROR[attr][0]
        if obj is None or not isinstance(obj, base) or _real(type(obj), base) is base:
            continue
        out.extend(_fields_of(obj, _stored_names(base)))
    return out


def _real(cls, base):
    """The class a traced mirror class stands for (:mod:`sim.policies.trace` subclasses the
    policy's class with recording wrappers and the same name)."""
    while cls is not base and cls.__bases__ and cls.__bases__[0].__name__ == cls.__name__ \
            and cls.__module__ == cls.__bases__[0].__module__:
        cls = cls.__bases__[0]
    return cls


# -- saving and restoring the fields (dry runs) ---------------------------------------------

def _save(fields) -> list:
    """``(object, name, value, kind, copy)`` of each field: its value and a copy of what it
    holds (a container's items, a plain object's fields)."""
    saved = []
    for obj, name in fields:
        value = getattr(obj, name)
        if isinstance(value, list):
            kind, copy = "list", list(value)
        elif isinstance(value, (dict, set)):
            kind, copy = ("dict" if isinstance(value, dict) else "set"), value.copy()
        elif _is_scalar(value):
            kind, copy = "scalar", None
        else:
            kind, copy = "obj", _object_state(value)
        saved.append((obj, name, value, kind, copy))
    return saved


def _restore(saved) -> None:
    for obj, name, value, kind, copy in saved:
        setattr(obj, name, value)
        if kind == "list":
            value[:] = copy
        elif kind in ("dict", "set"):
            value.clear()
            value.update(copy)
        elif kind == "obj":
            for field, v in copy.items():
                setattr(value, field, v)


_SCALARS = frozenset((int, float, bool, str))


def _is_scalar(value) -> bool:
    return value is None or type(value) in _SCALARS


def _object_state(value) -> dict:
    """The fields of a plain object (a hash table a policy's field holds, an argument of a
    seam call): name -> value, read through the slots' descriptors (an object that builds
    a field on first read, a single-node graph's server, is not asked)."""
    state = {}
    for klass in type(value).__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            descriptor = vars(klass).get(name)
            if descriptor is None or name in state:
                continue
            try:
                state[name] = descriptor.__get__(value, klass)
            except AttributeError:
                pass
    try:
        state.update(object.__getattribute__(value, "__dict__"))
    except AttributeError:
        pass
    return state


# -- what a probed iteration did to the fields ----------------------------------------------

class SeamRecord:
    """What one probed iteration did to the policy's own fields (``changes``, ids relative
    to its first id; part of the iteration's template, :attr:`key`), the seam calls it made
    (``calls``) and its integer fields at its start (``start``: the state a dry run of
    those calls compares against)."""

    __slots__ = ("changes", "key", "calls", "start", "fields", "unreplayable")

    def __init__(self, changes, calls, start, fields, unreplayable):
        self.changes = changes
        self.calls = calls
        self.start = start
        self.fields = fields
        self.unreplayable = unreplayable
        self.key = ("unreplayable",) if unreplayable else tuple(
            (i, c) for i, c in changes)

    @property
    def counters(self) -> bool:
        """Whether the iteration moves integer fields (a policy may act at some value)."""
        return any(c[0] in ("num", "obj") for _, c in self.changes)


class _Probe:
    """The recording of one probed iteration."""

    __slots__ = ("fields", "before", "calls", "base", "floor", "start")

    def __init__(self, fields, base, floor):
        self.fields = fields
        self.base = base
        self.floor = floor
        self.before = _save(fields)
        self.calls = []
        self.start = tuple(getattr(o, n) if _is_int(getattr(o, n)) else None
                           for o, n in fields)


def _is_int(value) -> bool:
    return type(value) is int


#: probes under way (a loop inside a probed iteration probes too) and the recording depth
_ACTIVE = []
_DEPTH = [0]
_INSTALLED = []


def _entries(sim) -> list:
    """``(object, method name)`` of each entry point the mirror calls into the policy's
    code: the seams the policy overrides and its replaced client's and locator's methods."""
    policy = sim.policy
    out = [(policy, name) for name in _POLICY_ENTRIES
           if _impl(type(policy), name) is not vars(Policy)[name]]
    holders = (sim.client, getattr(sim.client, "locator", None))
    for attr, obj in zip(_HOLDERS, holders):
        base = MIRROR[attr][0]
        if obj is None:
            continue
        real = _real(type(obj), base)
        if real is base:
            continue
        names = set()
        for klass in real.__mro__:
            if klass is base:
                break
            names.update(n for n, v in vars(klass).items()
                         if not n.startswith("__") and isinstance(v, types.FunctionType))
        out.extend((obj, name) for name in sorted(names))
    return out


def _impl(cls, name):
    """The function ``cls`` resolves ``name`` to (through a traced policy's records)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            if isinstance(value, _Record):
                value = value.value
            return getattr(value, "__func__", value)
    return None


def _recording(sim, obj, name):
    def entry(*args, **kwargs):
        reads = vars(obj).get("_policy_reads")
        if reads is not None:
            reads.add(name)
        method = getattr(type(obj), name).__get__(obj, type(obj))
        outer = _DEPTH[0] == 0 and _ACTIVE
        _DEPTH[0] += 1
        try:
            result = method(*args, **kwargs)
        finally:
            _DEPTH[0] -= 1
        if outer:
            # recorded once it returned, as stand-ins: holding an operand would keep it
            # (its ref count, its blocks) alive past the point where exact mode drops it
            call = (obj, name, tuple(_held(sim, a, 2) for a in args),
                    {k: _held(sim, v, 2) for k, v in kwargs.items()})
            for probe in _ACTIVE:
                probe.calls.append(call)
        return result
    return entry


def _long_lived(sim) -> frozenset:
    """Ids of the objects a run keeps from its start to its end (the simulation, its
    policy, client and locator, and everything the simulation holds as an attribute: the
    heap, the timing model, ...): a recorded call may hold them as they are."""
    cached = vars(sim).get("_seams_long_lived")
    locator = getattr(sim.client, "locator", None)
    if cached is None or cached[0] is not locator:
        ids = {id(sim), id(sim.policy), id(sim.client), id(locator)}
        ids.update(id(v) for v in vars(sim).values() if not _is_scalar(v))
        cached = (locator, frozenset(ids))
        sim._seams_long_lived = cached
    return cached[1]


class _StandIn:
    """An argument of a recorded seam call as a dry run sees it: its plain fields (numbers,
    strings, tuples of them) and those of the objects it holds, two levels deep; it owns
    nothing (no block, no ref count) and holds nothing alive."""

    def __init__(self, fields):
        self.__dict__.update(fields)


def _held(sim, value, depth):
    """``value`` as a recorded call keeps it: the simulation's long-lived objects as they
    are, plain values as they are, anything else as a :class:`_StandIn`."""
    if value is None or type(value) in _SCALARS or id(value) in _long_lived(sim):
        return value
    if type(value) is tuple:
        return tuple(_held(sim, v, depth) for v in value)
    if depth <= 0:
        return None
    fields = {}
    for field, v in _object_state(value).items():
        if v is None or type(v) in _SCALARS:
            fields[field] = v
        elif depth > 1 or type(v) is tuple:
            fields[field] = _held(sim, v, depth - 1)
    return _StandIn(fields)


def begin(sim, floor, calls=True):
    """Start recording a probed iteration (``floor``: the loop's first node id; ``calls``:
    whether to record its seam calls too, which only an iteration that moves integer
    fields needs, for :func:`horizon`); returns the token :func:`end` takes, or None when
    the policy keeps no state of its own."""
    fields = own_fields(sim)
    if not fields:
        return None
    probe = _Probe(fields, sim._next_id, floor)
    if not calls or not any(kind == "obj" or _is_int(value)
                            for _, _, value, kind, _ in probe.before):
        probe.calls = None
        return probe
    if not _ACTIVE:
        for obj, name in _entries(sim):
            _INSTALLED.append((obj, name, vars(obj).get(name, _MISSING)))
            setattr(obj, name, _recording(sim, obj, name))
    _ACTIVE.append(probe)
    return probe


_MISSING = object()


def end(sim, probe):
    """Stop recording ``probe``; its :class:`SeamRecord` (None for no token)."""
    if probe is None:
        return None
    recorded = probe in _ACTIVE
    if recorded:
        _ACTIVE.remove(probe)
    if recorded and not _ACTIVE:
        for obj, name, old in reversed(_INSTALLED):
            if old is _MISSING:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, old)
        _INSTALLED.clear()
    base, floor = probe.base, probe.floor
    stride = sim._next_id - base
    changes = []
    unreplayable = False
    try:
        for i, (obj, name, value, kind, copy) in enumerate(probe.before):
            change = _change(sim, value, kind, copy, getattr(obj, name), base, stride, floor)
            if change is not None:
                changes.append((i, change))
    except _Unreplayable:
        unreplayable = True
    return SeamRecord(tuple(changes), None if probe.calls is None else tuple(probe.calls),
                      probe.start, tuple(probe.fields), unreplayable)


def _change(sim, value, kind, copy, now, base, stride, floor):
    """How a field went from ``value`` (``copy``: its contents then) to ``now``, ids relative
    to the iteration; None: unchanged."""
    if kind == "scalar":
        if now is value or now == value and type(now) is type(value):
            return None
        if _is_int(value) and _is_int(now):
            return ("num", now - value)
        raise _Unreplayable
    if kind == "list":
        if not isinstance(now, list):
            raise _Unreplayable
        if now == copy:
            return None
        n = len(copy)
        if len(now) > n and now[:n] == copy:
            return ("append", tuple(_enc_item(sim, v, base, floor) for v in now[n:]))
        then = tuple(_enc_item(sim, v, base - stride, floor) for v in copy)
        items = tuple(_enc_item(sim, v, base, floor) for v in now)
        if then == items:
            return ("same", items)
        raise _Unreplayable
    if kind == "dict":
        if not isinstance(now, dict):
            raise _Unreplayable
        gone = copy.keys() - now.keys()
        removed = tuple(_enc_key(k, base, floor) for k in copy if k in gone) if gone else ()
        new = now.keys() - copy.keys()
        # keys added since go to the end of a dict, in the order they were added (a key
        # removed and added again there too: its place would not be replayed)
        tail = list(now)[-len(new):] if new else []
        if set(tail) != new:
            raise _Unreplayable
        added = [(_enc_key(k, base, floor), _enc_value(sim, now[k], base, floor))
                 for k in tail]
        changed = []
        try:
            moved = {k for k, _ in now.items() ^ copy.items()} - new - gone
        except TypeError:                      # values that do not hash: look at each
            moved = [k for k in now if k in copy and now[k] is not copy[k]]
        for k in moved:
            v, old = now[k], copy[k]
            if v is old or (v == old and type(v) is type(old) and _is_scalar(v)):
                continue
            if _is_int(v) and _is_int(old):
                changed.append((_enc_key(k, base, floor), ("delta", v - old)))
            else:
                changed.append((_enc_key(k, base, floor),
                                ("set", _enc_value(sim, v, base, floor))))
        changed.sort(key=repr)
        if not (removed or added or changed):
            return None
        return ("dict", removed, tuple(added), tuple(changed))
    if kind == "set":
        if not isinstance(now, set):
            raise _Unreplayable
        if now == copy:
            return None
        return ("set", tuple(_enc_key(k, base, floor) for k in copy - now),
                tuple(sorted((_enc_key(k, base, floor) for k in now - copy), key=repr)))
    # a plain object: its fields equal, or integers moved by a step
    if now is not value:
        raise _Unreplayable
    state = _object_state(now)
    steps = []
    for field, old in copy.items():
        new = state.get(field, _MISSING)
        if new is old or (new == old and type(new) is type(old) and _is_scalar(new)):
            continue
        if _is_int(old) and _is_int(new):
            steps.append((field, new - old))
        else:
            raise _Unreplayable
    return ("obj", tuple(steps)) if steps else None


def _enc_key(k, base, floor):
    """A dict key or set member: a node id of the loop relative to the iteration."""
    if _is_int(k) and k >= floor:
        return ("id", k - base)
    if _is_scalar(k) or (type(k) is tuple and all(_is_scalar(x) for x in k)):
        return ("v", k)
    raise _Unreplayable


def _enc_item(sim, v, base, floor):
    """A list item: a node id of the loop relative to the iteration, a value, or a node's
    ref count."""
    if _is_int(v):
        return ("id", v - base) if v >= floor else ("v", v)
    return _enc_value(sim, v, base, floor)


def _enc_value(sim, v, base, floor):
    """A dict value: a value as it is, or a node's ref count as the id it stands for."""
    if _is_scalar(v) or (type(v) is tuple and all(_is_scalar(x) for x in v)):
        return ("v", v)
    node_id = getattr(v, "id", None)
    if _is_int(node_id) and _node_rc(sim, node_id) is v:
        return ("rc", node_id - base) if node_id >= floor else ("rcv", node_id)
    raise _Unreplayable


def _node_rc(sim, node_id):
    """The ref count (``Arc<NodeId>``) the mirror holds for ``node_id``, or None."""
    locator = sim.client.locator
    graph = None if locator is None else locator.graphs.get(node_id)
    if graph is None:
        return None
    rc = getattr(graph, "rc", None)
    if rc is not None:
        return rc if rc.id == node_id else None
    entry = graph.server.memory_management.nodes.get(node_id)
    return None if entry is None else entry[0]


# -- the horizon: where the policy would act ------------------------------------------------

def _run_part(effect):
    """``(first offset, stride, members per iteration)`` of the run the closed form of
    ``effect`` builds, or None when it builds none."""
    if effect.shape not in ("graphs", "nodes"):
        return None
    return (effect.offset, effect.member_stride, effect.nodes_left)


def _fits_run(items, effect) -> bool:
    """Whether the ids a list appends per iteration are the members of the iteration the
    closed form's run takes (then the run is appended in their place)."""
    offset, member_stride, per = _run_part(effect)
    return (effect.shape == "graphs" and len(items) == per
            and per * member_stride == effect.stride
            and all(item == ("id", offset + j * member_stride) for j, item in enumerate(items)))


#: closed forms that build nothing: the live objects keep the ids of the last exact
#: iteration (node ids advance as a counter only)
_KEEPS_IDS = ("none", "steady", "drift")


def _rotates(change, stride) -> bool:
    """Whether a change only moves the iteration's window of ids: a list holding the same
    items relative to the iteration, a dict or set whose removed keys are the added ones
    one iteration back (nothing else changed)."""
    kind = change[0]
    if kind == "same":
        return True
    if kind == "dict":
        _, removed, added, changed = change
        back = sorted((("id", k[1] - stride) if k[0] == "id" else k for k, _ in added), key=repr)
        return not changed and back == sorted(removed, key=repr)
    if kind == "set":
        _, removed, added = change
        back = sorted((("id", k[1] - stride) if k[0] == "id" else k for k in added), key=repr)
        return back == sorted(removed, key=repr)
    return False


def horizon(sim, effect, limit) -> tuple:
    """``(iterations of effect that may be applied before the policy acts, whether the
    policy is what limits them)``, up to ``limit``."""
    record = getattr(effect, "seams", None)
    if record is None or not record.changes:
        return limit, False
    if record.unreplayable:
        return 0, True
    if effect.shape in _KEEPS_IDS:
        # the mirror keeps the last exact iteration's nodes: a field may count, or move
        # its window of ids with the iteration (it then stays as it is)
        for _, change in record.changes:
            if change[0] not in ("num", "obj") and not _rotates(change, effect.stride):
                return 0, True
    elif _run_part(effect) is not None:
        # the closed form keeps this effect's nodes in one run: a field may only count,
        # or append the ids the run takes (then the run stands for them)
        for _, change in record.changes:
            if change[0] not in ("num", "obj") and not (
                    change[0] == "append" and _fits_run(change[1], effect)):
                return 0, True
    if not record.counters or limit <= 0:
        return limit, False
    if not record.calls:
        return 0, True             # its seam calls were not recorded: they cannot run dry
    reference = _dry(sim, record, record.start, 0)
    if reference is None or reference[-1] != ("moved", _steps(record)):
        # the calls do not move the counters as the iteration did (something else the
        # policy runs moved them): where it acts cannot be found
        return 0, True
    now = tuple(getattr(o, n) if _is_int(getattr(o, n)) else None for o, n in record.fields)
    # the next iteration, its moving integers traced: what the seams compare them with
    predicates = []
    if _dry(sim, record, now, 0, predicates) != reference:
        return 0, True
    solved = _solve(predicates, limit)
    if solved is not None:
        return (solved, True) if solved < limit else (limit, False)

    # a moving integer left the traced arithmetic (an index, a hash, a bit operation):
    # dry runs one by one, then a bisection (a threshold)
    def acts(k):
        return _dry(sim, record, now, k) != reference

    for k in range(1, min(limit, LINEAR)):
        if acts(k):
            return k, True
    if limit <= LINEAR or not acts(limit - 1):
        return limit, False
    lo, hi = LINEAR - 1, limit - 1            # lo does not act, hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if acts(mid):
            hi = mid
        else:
            lo = mid
    return hi, True


def _steps(record) -> tuple:
    """The step of each integer field the iteration moves, in field order."""
    return tuple(change[1] for _, change in record.changes if change[0] == "num")


def _is_int_like(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- integers that remember what they were compared with ---------------------------------------

class _Expr:
    """An integer as a function of ``k``, the iterations skipped: ``a + b*k`` (``aff``), or
    ``(a + b*k) % m`` (``mod``), ``(a + b*k) // m`` (``div``)."""

    __slots__ = ("kind", "a", "b", "m")

    def __init__(self, kind, a, b, m=1):
        self.kind, self.a, self.b, self.m = kind, a, b, m

    def at(self, k):
        v = self.a + self.b * k
        if self.kind == "mod":
            return v % self.m
        if self.kind == "div":
            return v // self.m
        return v


def _expr(value):
    if isinstance(value, _Traced):
        return value.expr
    if _is_int(value):
        return _Expr("aff", value, 0)
    return None


class _Traced(int):
    """An integer field of the policy during a dry run of the next iteration: its value,
    and how it moves with the iterations skipped (:class:`_Expr`). Arithmetic with plain
    integers keeps the trace; each comparison is recorded in ``predicates`` (with its
    outcome); any other use that could steer the policy is recorded as opaque."""

    def __new__(cls, expr, log):
        self = int.__new__(cls, expr.at(0))
        self.expr, self.log = expr, log
        return self

    def _new(self, expr):
        return _Traced(expr, self.log) if expr is not None else self._opaque()

    def _opaque(self):
        self.log.append(None)
        return None

    def _affine(self, other, sign_self, sign_other):
        mine, theirs = self.expr, _expr(other)
        if theirs is None:
            self._opaque()                 # a float, say: its own method takes over
            return NotImplemented
        if mine.kind != "aff" or theirs.kind != "aff":
            self._opaque()
            return sign_self * int(self) + sign_other * int(other)
        return self._new(_Expr("aff", sign_self * mine.a + sign_other * theirs.a,
                               sign_self * mine.b + sign_other * theirs.b))

    def __add__(self, other):
        return self._affine(other, 1, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._affine(other, 1, -1)

    def __rsub__(self, other):
        return self._affine(other, -1, 1)

    def __neg__(self):
        return self._affine(0, -1, 1)

    def __mul__(self, other):
        if not _is_int(other) or self.expr.kind != "aff":
            self._opaque()
            return int(self) * other
        return self._new(_Expr("aff", self.expr.a * other, self.expr.b * other))

    __rmul__ = __mul__

    def _divide(self, other, kind):
        if not _is_int(other) or other <= 0 or self.expr.kind != "aff":
            self._opaque()
            return int(self) % other if kind == "mod" else int(self) // other
        return self._new(_Expr(kind, self.expr.a, self.expr.b, other))

    def __mod__(self, other):
        return self._divide(other, "mod")

    def __floordiv__(self, other):
        return self._divide(other, "div")

    def _compare(self, other, op):
        theirs = _expr(other)
        if theirs is None:
            self._opaque()
            return NotImplemented
        outcome = op(int(self), int(other))
        self.log.append((op, self.expr, theirs, outcome))
        return outcome

    def __eq__(self, other):
        return self._compare(other, _EQ)

    def __ne__(self, other):
        return self._compare(other, _NE)

    def __lt__(self, other):
        return self._compare(other, _LT)

    def __le__(self, other):
        return self._compare(other, _LE)

    def __gt__(self, other):
        return self._compare(other, _GT)

    def __ge__(self, other):
        return self._compare(other, _GE)

    def __bool__(self):
        return self._compare(0, _NE)

    def __hash__(self):
        self._opaque()
        return int.__hash__(self)

    def __index__(self):
        self._opaque()
        return int(self)

    def __int__(self):
        return int.__int__(self)

    def __float__(self):
        self._opaque()
        return int.__float__(self)

    for _name in ("__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
                  "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__pow__",
                  "__rpow__", "__truediv__", "__rtruediv__", "__rmod__", "__rfloordiv__",
                  "__divmod__", "__rdivmod__", "__abs__", "__invert__", "__format__",
                  "__str__", "bit_length", "to_bytes", "__round__", "__trunc__", "__floor__",
                  "__ceil__"):
        def _escape(self, *args, _name=_name):
            self._opaque()
            return getattr(int, _name)(int(self), *(int(a) if isinstance(a, _Traced) else a
                                                    for a in args))
        locals()[_name] = _escape
    del _name, _escape


def _op(f):
    return f


_EQ = _op(lambda x, y: x == y)
_NE = _op(lambda x, y: x != y)
_LT = _op(lambda x, y: x < y)
_LE = _op(lambda x, y: x <= y)
_GT = _op(lambda x, y: x > y)
_GE = _op(lambda x, y: x >= y)


def _solve(predicates, limit):
    """The first ``k`` in ``[1, limit)`` at which one of the recorded comparisons comes out
    otherwise than for the next iteration (``limit``: none does), or None when a traced
    integer left the arithmetic :func:`_solve` follows."""
    first = limit
    for entry in predicates:
        if entry is None:
            return None
        op, left, right, outcome = entry
        if left.kind == "aff" and right.kind == "aff":
            a, b = left.a - right.a, left.b - right.b
            if b == 0:
                continue
            if op in (_EQ, _NE):
                if a == 0:
                    k = 1                       # equal now, not for the next k
                elif (-a) % b == 0 and -a // b >= 1:
                    k = -a // b
                else:
                    continue
            else:
                k = _bisect(lambda k: op(a + b * k, 0) != outcome, limit)
        elif left.kind == "aff" and left.b == 0 or right.kind == "aff" and right.b == 0:
            moving = right if left.kind == "aff" and left.b == 0 else left
            if moving.kind == "mod":
                period = moving.m // math.gcd(moving.b, moving.m) if moving.b else 1
                k = next((k for k in range(1, min(limit, period + 1))
                          if op(left.at(k), right.at(k)) != outcome), limit)
            elif moving.kind == "div":
                k = _bisect(lambda k: op(left.at(k), right.at(k)) != outcome, limit)
            else:
                return None
        else:
            return None
        first = min(first, k)
    return first


def _bisect(flipped, limit) -> int:
    """The first ``k`` in ``[1, limit)`` where the monotone ``flipped(k)`` holds, else
    ``limit``."""
    if limit <= 1 or not flipped(limit - 1):
        return limit
    lo, hi = 0, limit - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if flipped(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _dry(sim, record, numbers, k, predicates=None):
    """The calls, heap events and time charges the recorded seam calls make with the
    integer fields at ``numbers`` moved ``k`` iterations on, everything restored after;
    None when the fields cannot be set. ``predicates``: a list, to run with the moving
    integers traced (:class:`_Traced`) and collect what they were compared with."""
    fields = record.fields
    saved = _save(fields)
    counters = {k_: v for k_, v in vars(sim).items() if type(v) in (int, float, bool)}
    steps = {i: c for i, c in record.changes}
    out = []
    try:
        for i, (obj, name) in enumerate(fields):
            change = steps.get(i)
            if change is None:
                if numbers[i] is not None:
                    setattr(obj, name, numbers[i])
                continue
            if change[0] == "num":
                if numbers[i] is None:
                    return None
                value = numbers[i] + change[1] * k
                if predicates is not None:
                    value = _Traced(_Expr("aff", value, change[1]), predicates)
                setattr(obj, name, value)
            elif change[0] == "obj":
                held = getattr(obj, name)
                for field, step in change[1]:
                    value = getattr(held, field) + step * k
                    if predicates is not None:
                        value = _Traced(_Expr("aff", value, step), predicates)
                    setattr(held, field, value)
        before = [int(getattr(obj, name)) for i, (obj, name) in enumerate(fields)
                  if steps.get(i, ("",))[0] == "num"]
        with _Absorbing(sim, out):
            try:
                for obj, name, args, kwargs in record.calls:
                    getattr(type(obj), name).__get__(obj, type(obj))(*args, **kwargs)
            except Exception as exc:  # a seam that needed what was absorbed: it acts
                out.append(("raised", type(exc).__name__))
        after = [int(getattr(obj, name)) if _is_int_like(getattr(obj, name)) else None
                 for i, (obj, name) in enumerate(fields) if steps.get(i, ("",))[0] == "num"]
        out.append(("moved", tuple(None if b is None else b - a
                                   for a, b in zip(before, after))))
        return out
    finally:
        _restore(saved)
        for name, value in counters.items():
            setattr(sim, name, value)


class _DryHeap(HeapTap):
    """The heap's events recorded, not made."""

    __slots__ = ("out",)

    def __init__(self, out):
        self.out = out

    def alloc(self, heap, nbytes, align):
        self.out.append(("alloc", nbytes))

    def free(self, heap, nbytes, block):
        self.out.append(("free", nbytes))

    def realloc(self, heap, old_nbytes, nbytes, block):
        self.out.append(("realloc", old_nbytes, nbytes))

    def libc_alloc(self, heap, nbytes, zeroed):
        self.out.append(("alloc", nbytes))

    def libc_free(self, heap, nbytes, block):
        self.out.append(("free", nbytes))

    def alloc_many(self, heap, nbytes, count):
        self.out.append(("alloc", nbytes, count))

    def free_many(self, heap, nbytes, count):
        self.out.append(("free", nbytes, count))


class _DryTiming:
    """The timing model's calls recorded, not charged."""

    def __init__(self, out):
        self._out = out

    def __getattr__(self, name):
        out = self._out

        def charge(*args, **kwargs):
            out.append(("time", name, args, tuple(sorted(kwargs.items()))))
        return charge


class _Absorbing:
    """Within: burn's mirror methods (and the policy's per-graph ones) record their call and
    return None, the heap and the timing model record their events, ``sim.charge`` records
    its charge."""

    def __init__(self, sim, out):
        self.sim = sim
        self.out = out

    def __enter__(self):
        sim, out = self.sim, self.out
        self.patched = _absorbers(sim.policy)
        _OUT.append(out)
        for klass, name, _, absorbed in self.patched:
            setattr(klass, name, absorbed)
        heap = sim.heap
        self.tap, heap.tap = heap.tap, _DryHeap(out)
        # a table grown in the dry run charges its rehash (where the profile has one)
        # nowhere but ``out``
        self.rehash = heap.rehash
        if heap.rehash is not None:
            heap.rehash = lambda items: out.append(("rehash", items))
        self.timing, sim.timing = sim.timing, _DryTiming(out)
        self.charge = vars(sim).get("charge", _MISSING)
        sim.charge = lambda ns, locked=False: out.append(("charge", ns, locked))
        return self

    def __exit__(self, *exc):
        sim = self.sim
        for klass, name, original, _ in reversed(self.patched):
            setattr(klass, name, original)
        _OUT.pop()
        sim.heap.tap = self.tap
        sim.heap.rehash = self.rehash
        sim.timing = self.timing
        if self.charge is _MISSING:
            del sim.charge
        else:
            sim.charge = self.charge
        return False


#: the record the absorbed methods write to (the innermost dry run's)
_OUT = []

_ABSORBERS = {}


def _absorbers(policy) -> list:
    """``(class, name, original, absorber)`` of each method a dry run absorbs: every method of
    burn's mirror classes and of the policy's per-graph classes (its client's and locator's
    own methods run: their state is the policy's fields)."""
    key = tuple(getattr(policy, attr, base) for attr, (base, _) in MIRROR.items())
    found = _ABSORBERS.get(key)
    if found is None:
        classes = []
        for attr, (base, _) in MIRROR.items():
            for klass in getattr(policy, attr, base).__mro__:
                if attr in _HOLDERS and klass is not base:
                    continue
                classes.append(klass)
                if klass is base:
                    break
        found = []
        for klass in dict.fromkeys(classes):
            for name, value in list(vars(klass).items()):
                if isinstance(value, types.FunctionType) and not name.startswith("__"):
                    found.append((klass, name, value, _absorbed(f"{klass.__name__}.{name}")))
        _ABSORBERS[key] = found
    return found


def _absorbed(label):
    def absorbed(self, *args, **kwargs):
        _OUT[-1].append(("call", label))
    return absorbed


# -- applying n iterations -------------------------------------------------------------------

def advance(sim, effect, count, first, run=None) -> None:
    """Bring the policy's fields ``count`` iterations of ``effect`` on, after its closed
    form: ``first``, the first id of the first iteration applied; ``run``: the
    :class:`~sim.burn.graph.runs.NodeRun` the closed form added, or None."""
    record = getattr(effect, "seams", None)
    if record is None or not record.changes or count <= 0:
        return
    stride = effect.stride
    pending = []
    keeps = effect.shape in _KEEPS_IDS
    for i, change in record.changes:
        obj, name = record.fields[i]
        kind = change[0]
        if keeps and kind not in ("num", "obj"):
            continue        # a window of ids that moves with the iteration (horizon)
        if kind == "num":
            setattr(obj, name, getattr(obj, name) + change[1] * count)
        elif kind == "obj":
            held = getattr(obj, name)
            for field, step in change[1]:
                setattr(held, field, getattr(held, field) + step * count)
        elif kind == "append":
            target = getattr(obj, name)
            if run is not None:
                target.append(run)
                continue
            for j in range(count):
                base = first + j * stride
                target.extend(_dec(sim, item, base, pending, None, None) for item in change[1])
        elif kind == "same":
            target = getattr(obj, name)
            base = first + (count - 1) * stride
            target[:] = [_dec(sim, item, base, pending, None, None) for item in change[1]]
        elif kind == "set":
            target = getattr(obj, name)
            for j in range(count):
                base = first + j * stride
                for key in change[1]:
                    target.discard(_dec_key(key, base))
                for key in change[2]:
                    target.add(_dec_key(key, base))
        else:  # dict
            target = getattr(obj, name)
            _, removed, added, changed = change
            for j in range(count):
                base = first + j * stride
                for key in removed:
                    target.pop(_dec_key(key, base), None)
                for key, value in added:
                    k = _dec_key(key, base)
                    target[k] = _dec(sim, value, base, pending, target, k)
                for key, (how, value) in changed:
                    k = _dec_key(key, base)
                    if how == "delta":
                        target[k] += value
                    else:
                        target[k] = _dec(sim, value, base, pending, target, k)
    for target, key, node_id in pending:
        if target is None or key not in target:
            continue
        rc = _node_rc(sim, node_id)
        if rc is None:
            raise AssertionError(f"fast-forward: no node {node_id} for the policy's index")
        target[key] = rc


def _dec_key(key, base):
    kind, value = key
    return base + value if kind == "id" else value


_PENDING = object()


def _dec(sim, item, base, pending, target, key):
    kind, value = item
    if kind == "id":
        return base + value
    if kind == "v":
        return value
    node_id = base + value if kind == "rc" else value
    if target is None:
        rc = _node_rc(sim, node_id)
        if rc is None:
            raise AssertionError(f"fast-forward: no node {node_id} for the policy's list")
        return rc
    pending.append((target, key, node_id))
    return _PENDING


def indexes_nodes(effect) -> bool:
    """Whether the policy's fields changed by ``effect`` name nodes (ids or ref counts):
    the closed form must build every node they name."""
    record = getattr(effect, "seams", None)
    return record is not None and (record.unreplayable or any(
        change[0] not in ("num", "obj") for _, change in record.changes))
