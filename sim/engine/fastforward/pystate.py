"""The Python state a loop body can reach, read while fast-forward probes the loop.

Fast-forward proves iterations identical from the simulated state; it does not call the
body for the iterations it applies. A body whose behaviour depends on Python state it
changes itself (a counter it increments, ``if i % 100 == 0: loss.backward()``) would have
its branches extrapolated away, and whatever the body changes (a counter, a log) would
end the loop short of exact mode's. So, around each probed iteration,
:func:`plain_state` reads an image of everything the body can reach that the simulator
does not own, and :mod:`sim.engine.fastforward.repeat` runs a loop exactly when its
agreeing probes changed it, with one note naming it (:func:`note_moved`, once per loop
and process). Proving the state unchanged is what lets a loop be fast-forwarded: an
iteration that ran with the same Python state and the same simulated state does the
same thing again.

What is reached, from the body (a function, a bound method, a callable object): its
closure cells, its defaults, its attributes, the globals its code names (and the code
nested in it), and, from each of those, recursively: the items of lists, tuples, dicts,
sets and deques; an object's ``__dict__`` and slots and its class's attributes (a
property's getter, setter and deleter among them); the
cells, defaults, attributes and named globals of the functions it holds (a helper it
calls); the instance a method is bound to (``items.append``'s list too); the attributes
of a module it reaches (a global, a closure cell where the program imported it) that
the code reaching it names (``random.random``'s generator). Not read, as expected to
change every iteration and the simulator's to prove: objects of the simulator's own
types (tensors, devices, models, the simulation) and functions of its own code, taken
as their type or identity. Functions of the standard library and installed packages
are taken as their identity (their module state is reached through what the code
names). Objects whose state cannot be read -- C types other than plain values and the
containers above (``itertools.count``, generators and iterators, ``random.Random``,
files) -- count as changing in every iteration; so does a body whose code reads one of
the simulated observables that move every iteration (``sim.now_ns``,
``sim.rss_bytes()``, :data:`OBSERVABLES`; not ``sim.loop_index``, read for labels), and a body reaching more than
:data:`MAX_OBJECTS` objects or nesting deeper than :data:`MAX_DEPTH` (not proven
unchanged). The image is compared for equality: a value that changed, an item
appended (a log: fast-forward would not append the skipped iterations' items), an
attribute added; floats by their bits.

Examples
--------
>>> count = {"i": 0}
>>> def body():
...     count["i"] += 1
>>> before = plain_state(body); body()
>>> moved(before, plain_state(body))
['count']
"""

from __future__ import annotations

import collections
import datetime
import decimal
import functools
import os
import re
import struct
import sys
import sysconfig
import types

__all__ = ["plain_state", "moved", "note_moved", "MAX_OBJECTS", "MAX_DEPTH", "OBSERVABLES"]

#: objects (not counting plain values) one image reads at most: past it the body's state
#: is not proven unchanged
MAX_OBJECTS = 20_000
#: how deep an image follows references at most (the same)
MAX_DEPTH = 40
#: the simulated observables a workload reads (sim.output.apidoc) that move from one
#: iteration to the next: a body whose code names one may branch on it. Not
#: ``sim.loop_index``: it is there for labels (``sim.at``, a probe's phase names:
#: experiments/p10_ema.py), and a body branching on it is not caught
OBSERVABLES = frozenset({"now_ns", "rss_bytes", "live_bytes", "live_blocks",
                         "live_graphs", "live_nodes", "registered", "memory_pool_usage"})

#: the loops noted already (code objects): each is noted once per process
_NOTED = set()

_POINTER = struct.calcsize("P")
_HEAPTYPE = 1 << 9
_PLAIN = frozenset({int, bool, str, bytes, complex, type(None), type(...),
                    type(NotImplemented), range})
_FLOATS = frozenset({float})
#: C types holding no state that changes (taken as themselves)
_CONSTANT = frozenset({types.CodeType, types.MethodDescriptorType,
                       types.WrapperDescriptorType, types.GetSetDescriptorType,
                       types.MemberDescriptorType, types.ClassMethodDescriptorType,
                       re.Pattern, datetime.date, datetime.datetime,
                       datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal})
#: built-in containers whose items are read (and whose Python subclasses are readable)
_SEQUENCES = (list, tuple, set, frozenset, collections.deque)
_MAPPINGS = (dict, types.MappingProxyType)
_CONTAINER_BASES = frozenset(_SEQUENCES + _MAPPINGS + (collections.OrderedDict,
                                                        collections.defaultdict, object))

#: what a class statement puts in its class's dict besides its attributes and methods
_CLASS_BOOKKEEPING = frozenset({"__module__", "__dict__", "__weakref__", "__doc__",
                                "__qualname__", "__slots__"})

# what an image holds besides plain values: markers (compared by identity)
_REF = object()       # followed by the index of an object read before in the image
_EMPTY = object()     # a cell not yet filled, a slot not set


def _library_prefixes() -> tuple:
    paths = sysconfig.get_paths()
    out = {os.path.realpath(paths[k]) + os.sep
           for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(out)) + ("<frozen",)


_LIBRARY = _library_prefixes()


def _owned_module(name) -> bool:
    """Whether a module name is the simulator's own (``sim`` and its submodules)."""
    return type(name) is str and (name == "sim" or name.startswith("sim."))


def _library_code(code) -> bool:
    return code.co_filename.startswith(_LIBRARY)


def _code_names(code, out=None) -> set:
    """The names ``code`` and the code nested in it (lambdas, comprehensions) use."""
    out = set() if out is None else out
    out.update(code.co_names)
    for const in code.co_consts:
        if type(const) is types.CodeType:
            _code_names(const, out)
    return out


def _readable_layout(kind) -> bool:
    """Whether instances of ``kind`` hold no state beyond their ``__dict__``, slots and
    the built-in containers' items: every class of its MRO is a built-in container (or
    object), or was made by a ``class`` statement, which adds only a dict, a weakref list
    and its slots to its base's layout. A C type's own fields (``random.Random``'s
    generator, an iterator's position) cannot be read."""
    for cls in kind.__mro__:
        if cls in _CONTAINER_BASES:
            continue
        if not cls.__flags__ & _HEAPTYPE:
            return False
        own = cls.__dict__
        base = cls.__base__
        slots = own.get("__slots__", ())
        if type(slots) is str:
            slots = (slots,)
        room = _POINTER * sum(1 for s in slots if s not in ("__dict__", "__weakref__"))
        if "__dict__" in own and not base.__dictoffset__:
            room += _POINTER
        if "__weakref__" in own and not base.__weakrefoffset__:
            room += _POINTER
        if cls.__basicsize__ - base.__basicsize__ > room:
            return False
    return True


# how each type is read (cached per type): one of
_ATOM, _FLOAT, _OWNED, _SEQ, _MAP, _FUNC, _METHOD, _BUILTIN, _CLASS, _MODULE, _PARTIAL, \
    _WRAPPED, _OBJECT, _CONST, _OPAQUE, _ARRAY, _PROPERTY = range(17)
_HOW = {}


def _how(kind) -> int:
    how = _HOW.get(kind)
    if how is None:
        how = _HOW[kind] = _classify(kind)
    return how


def _classify(kind) -> int:
    if kind in _PLAIN:
        return _ATOM
    if kind is float:
        return _FLOAT
    if _owned_module(getattr(kind, "__module__", None)):
        return _OWNED
    if kind in _CONSTANT:
        return _CONST
    if getattr(kind, "__module__", None) == "numpy":
        # a NumPy array by its shape, dtype and bytes; NumPy's scalars do not change
        numpy = sys.modules["numpy"]
        if kind is numpy.ndarray:
            return _ARRAY
        if issubclass(kind, numpy.generic):
            return _CONST
    if kind is types.FunctionType:
        return _FUNC
    if kind is types.MethodType:
        return _METHOD
    if kind is types.BuiltinFunctionType or kind is types.MethodWrapperType:
        return _BUILTIN
    if issubclass(kind, type):
        return _CLASS
    if kind is types.ModuleType:
        return _MODULE
    if kind is functools.partial:
        return _PARTIAL
    if kind in (staticmethod, classmethod):
        return _WRAPPED
    if kind is property:
        return _PROPERTY
    if kind is types.SimpleNamespace:
        return _OBJECT
    if kind in _SEQUENCES:
        return _SEQ
    if kind in _MAPPINGS or kind in (collections.OrderedDict, collections.defaultdict):
        return _MAP
    if _readable_layout(kind):
        return _OBJECT
    return _OPAQUE


class _Image:
    """One reading of what a body reaches: :meth:`read` appends each root's image."""

    __slots__ = ("out", "seen", "alive", "left", "unreadable", "names", "attrs")

    def __init__(self):
        self.seen = {}
        self.names = ()         # the names the code being reached uses (of its modules)
        self.attrs = {}         # id(module) -> the attributes of it read so far
        self.alive = []         # what was read, kept alive so no id is reused meanwhile
        self.left = MAX_OBJECTS
        self.out = []
        self.unreadable = []

    def read(self, name, value, names=None):
        """``(name, image, what could not be read)`` of one root."""
        self.out, self.unreadable = [], []
        self.names = () if names is None else names
        try:
            self._value(value, 0)
        except Exception as exc:    # a user's object raising as it is read
            self._cannot(f"reading it raised {type(exc).__name__}")
        return name, tuple(self.out), tuple(self.unreadable)

    def _seen_before(self, v) -> bool:
        """Whether ``v`` was read before in this reading (then a reference to it is
        appended); otherwise it is marked read."""
        at = self.seen.get(id(v))
        if at is not None:
            self.out.append(_REF)
            self.out.append(at)
            return True
        self.seen[id(v)] = len(self.seen)
        self.alive.append(v)
        return False

    def _cannot(self, what) -> None:
        self.unreadable.append(what)

    def _value(self, v, depth) -> None:
        """Append what ``v`` is to the image: a plain value itself, an object its kind and
        what it holds (read once: a second reference is a :data:`_REF`), within
        :data:`MAX_OBJECTS` and :data:`MAX_DEPTH`."""
        kind = type(v)
        how = _HOW.get(kind)
        if how is None:
            how = _how(kind)
        out = self.out
        if how == _ATOM:
            out.append(kind)
            out.append(v)
            return
        if how == _FLOAT:
            out.append(float)
            out.append(v.hex())
            return
        if how == _OWNED or how == _CONST:
            # the simulator's objects change as it proves; constants do not change
            out.append(kind if how == _OWNED else v)
            return
        if how == _MODULE:
            # a module held as a value (a closure cell, a default, an item) or named by
            # the code: the attributes of it the code being reached names
            self._module(v, self.names, depth)
            return
        if self._seen_before(v):
            return
        self.left -= 1
        if self.left < 0:
            self._cannot(f"more than {MAX_OBJECTS} objects")
            return
        if depth > MAX_DEPTH:
            self._cannot(f"deeper than {MAX_DEPTH} references")
            return
        depth += 1
        out.append(kind)
        # the common kinds here, the others by the table of their readers
        if how == _SEQ:
            self._items(v, depth)
        elif how == _MAP:
            self._mapping(v, depth)
        elif how == _OBJECT:
            self._object(v, kind, depth)
        elif how == _FUNC:
            self._function(v, depth)
        elif how == _CLASS:
            self._class(v, depth)
        elif how in _READERS:
            _READERS[how](self, v, depth)
        else:
            self._cannot(f"{kind.__module__}.{kind.__qualname__}")

    def _bound_method(self, v, depth) -> None:
        self._value(v.__func__, depth)
        self._value(v.__self__, depth)

    def _builtin(self, v, depth) -> None:
        owner = v.__self__
        if owner is None or type(owner) is types.ModuleType:
            self.out.append(v)            # a function of a C module: no state of its own
        else:
            self.out.append(v.__name__)
            self._value(owner, depth)

    def _partial(self, v, depth) -> None:
        self._value(v.func, depth)
        self._items(v.args, depth)
        self._mapping(v.keywords, depth)
        self._mapping(v.__dict__, depth)

    def _wrapped(self, v, depth) -> None:
        self._value(v.__func__, depth)

    def _property(self, v, depth) -> None:
        # its getter, setter and deleter: a getter may change state the body never names
        self._value(v.fget, depth)
        self._value(v.fset, depth)
        self._value(v.fdel, depth)

    def _array(self, v, depth) -> None:
        out = self.out
        out.append(v.shape)
        out.append(v.dtype.str)
        if v.dtype.hasobject:
            self._items(v.ravel().tolist(), depth)
        else:
            out.append(v.tobytes())

    def _items(self, v, depth) -> None:
        out = self.out
        out.append(len(v))
        items = tuple(v)
        kinds = tuple(map(type, items))
        if _PLAIN.issuperset(kinds):
            # plain values only (a list of ints or strings): read at C speed
            out.append(items)
            out.append(kinds)
            return
        if _FLOATS.issuperset(kinds):
            out.append(tuple(map(float.hex, items)))
            return
        for item in items:
            self._value(item, depth)

    def _mapping(self, v, depth) -> None:
        out = self.out
        out.append(len(v))
        if type(v) is collections.defaultdict:
            self._value(v.default_factory, depth)
        for key, item in tuple(v.items()):
            self._value(key, depth)
            self._value(item, depth)

    def _object(self, v, kind, depth) -> None:
        """An instance of a class made by a ``class`` statement (or a namespace): its
        class, its container items (a subclass of list or dict), slots and dict."""
        self._value(kind, depth)
        if isinstance(v, _MAPPINGS):
            self._mapping(v, depth)
        elif isinstance(v, _SEQUENCES):
            self._items(v, depth)
        for cls in kind.__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if type(slots) is str else slots:
                if slot not in ("__dict__", "__weakref__"):
                    if slot.startswith("__") and not slot.endswith("__"):
                        slot = f"_{cls.__name__.lstrip('_')}{slot}"     # a private name
                    self._value(getattr(v, slot, _EMPTY), depth)
        own = getattr(v, "__dict__", None)
        if own is not None:
            self._mapping(own, depth)

    def _class(self, cls, depth) -> None:
        """A class: the simulator's, a built-in or a library's as itself; a class of the
        user's code by its attributes (a class attribute used as a counter), its
        methods and its bases."""
        out = self.out
        out.append(cls)
        module = cls.__dict__.get("__module__")
        if type(module) is not str or module == "builtins" or _owned_module(module):
            return
        home = sys.modules.get(module)
        where = getattr(home, "__file__", None) if home is not None else "<user>"
        if where is None or where.startswith(_LIBRARY):
            return
        for key, item in tuple(cls.__dict__.items()):
            if key not in _CLASS_BOOKKEEPING:
                out.append(key)
                self._value(item, depth)
        for base in cls.__bases__:
            self._value(base, depth)

    def _function(self, fn, depth) -> None:
        """A function: its code (what it does) and, for the user's code, the state it
        can reach (cells, defaults, attributes, the globals its code names)."""
        out = self.out
        code = fn.__code__
        out.append(code)
        if _owned_module(fn.__module__) or _library_code(code):
            return
        self._reach(fn, code, depth)

    def _reach(self, fn, code, depth) -> None:
        out = self.out
        names = sorted(_code_names(code))
        outer, self.names = self.names, names
        try:
            self._reach_from(fn, names, depth)
        finally:
            self.names = outer

    def _reach_from(self, fn, names, depth) -> None:
        out = self.out
        for cell in fn.__closure__ or ():
            try:
                self._value(cell.cell_contents, depth)
            except ValueError:          # a cell not yet filled
                out.append(_EMPTY)
        self._value(fn.__defaults__, depth)
        self._value(fn.__kwdefaults__, depth)
        self._value(fn.__dict__, depth)
        self._observables(names)
        space = fn.__globals__
        for name in names:
            if name in space:
                out.append(name)
                self._value(space[name], depth)

    def _observables(self, names) -> None:
        for name in OBSERVABLES.intersection(names):
            self._cannot(f"sim.{name}")

    def _module(self, module, names, depth) -> None:
        """A module a code names: the attributes the code names (``random.random``,
        ``cfg.n``), modules among them likewise. A module reached again is read for the
        attributes of it no code read before in this reading (a helper naming ``cfg.lr``,
        the body ``cfg.n``)."""
        out = self.out
        out.append(types.ModuleType)
        out.append(module.__name__)
        if _owned_module(module.__name__):
            return
        read = self.attrs.get(id(module))
        if read is None:
            read = self.attrs[id(module)] = set()
            self.alive.append(module)
        space = module.__dict__
        for name in names:
            if name not in read and name in space and not name.startswith("__"):
                read.add(name)
                out.append(name)
                self._value(space[name], depth + 1)


#: how -> the reader of the kinds :meth:`_Image._value` does not read itself
_READERS = {_METHOD: _Image._bound_method, _BUILTIN: _Image._builtin,
            _PARTIAL: _Image._partial, _WRAPPED: _Image._wrapped,
            _PROPERTY: _Image._property, _ARRAY: _Image._array}


def _call_names(body) -> list:
    """The names the code a callable that is not a function runs names (a partial's
    function, an object's ``__call__``): what is read of the modules it holds."""
    fn = body.func if type(body) is functools.partial else body
    if type(fn) is types.MethodType:
        fn = fn.__func__
    if type(fn) is not types.FunctionType:
        fn = getattr(type(fn), "__call__", None)
    return sorted(_code_names(fn.__code__)) if type(fn) is types.FunctionType else []


def plain_state(body):
    """The images of what ``body`` can reach (see the module doc), one per root (a
    closure cell, a global it names, its defaults, attributes, bound instance):
    ``((name, image, unreadable), ...)``; None where ``body`` is None."""
    if body is None:
        return None
    image = _Image()
    fn = body
    roots = []
    if type(body) is types.MethodType:
        fn = body.__func__
        named = sorted(_code_names(fn.__code__)) if type(fn) is types.FunctionType else ()
        roots.append(image.read("self", body.__self__, named))
    if type(fn) is not types.FunctionType:
        return tuple(roots) + (image.read("body", fn, _call_names(fn)),)
    code = fn.__code__
    names = sorted(_code_names(code))
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            roots.append(image.read(name, cell.cell_contents, names))
        except ValueError:          # a cell not yet filled
            continue
    if fn.__defaults__ or fn.__kwdefaults__:
        roots.append(image.read("defaults", (fn.__defaults__, fn.__kwdefaults__), names))
    if fn.__dict__:
        roots.append(image.read("attributes", fn.__dict__, names))
    space = fn.__globals__
    for name in names:
        if name in space:
            roots.append(image.read(name, space[name], names))
    image.out, image.unreadable = [], []
    image._observables(names)
    if image.unreadable:
        roots.append(("code", (), tuple(image.unreadable)))
    return tuple(roots)


def moved(before, after) -> list:
    """The roots whose images differ between two :func:`plain_state` readings, or that
    reach state that cannot be read (named with what could not be read)."""
    if before is None or after is None:
        return []
    old = {name: image for name, image, _ in before}
    out = []
    for name, image, unreadable in after:
        if unreadable:
            out.append(f"{name}: {', '.join(sorted(set(unreadable)))}")
        elif old.get(name, _REF) != image:
            out.append(name)
    names = {name for name, _, _ in after}
    return out + [name for name in old if name not in names]


def note_moved(body, names, stream=None) -> None:
    """One line on stderr (once per loop): the loop ``body`` changed ``names`` from one
    probed iteration to the next, or reads state that cannot be read, so it runs
    exactly."""
    fn = getattr(body, "__func__", body)
    code = getattr(fn, "__code__", None)
    key = code if code is not None else type(body)
    if key in _NOTED:
        return
    _NOTED.add(key)
    where = (f"{getattr(code, 'co_qualname', code.co_name)} "
             f"({code.co_filename}:{code.co_firstlineno})") if code is not None else repr(body)
    print(f"sim: note: the loop body {where} changes Python state it can read from one "
          f"iteration to the next, or reads what cannot be proven unchanged "
          f"({'; '.join(sorted(set(names)))}); fast-forward does not call the body for "
          f"the iterations it skips, so this loop runs exactly",
          file=stream or sys.stderr, flush=True)
