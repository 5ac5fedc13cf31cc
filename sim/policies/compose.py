"""Policies made of several fixes: ``-p skip-untracked+drop-release``.

Applying two patches to burn applies both changes; composing two policies does the same
with their seams. The composed policy is a class whose bases are the members, so each
seam resolves along Python's method order as a patched burn's code would run:

- a seam only one member overrides is that member's;
- a seam several members override composes when every one of them but one calls
  ``super()`` (it adds to the seam, as ``drop-release``'s ``after_backward`` releases
  its deferred nodes and then runs the sweep): the bases are ordered so that those come
  first and the one that replaces the seam last (``dedup-sweep``'s
  ``cleanup_orphaned_entries`` then serves ``periodic-sweep``'s periodic sweep and
  the backward's alike, as the two patches applied together do: it is
  ``dedup-sweep``'s ``GraphCleaner`` that both reach);
- ``may_compact`` holds when it holds for every member (fast-forward needs nothing of a
  composed policy: it replays the seams, whose state is every member's);
- a member that replaces a seam whose burn body calls another seam (``after_backward``
  calls ``cleanup_orphaned_entries``) with one that does not call it, beside a member
  that changes that other seam (``burn-0.20-pre.1`` and ``dedup-sweep``), conflicts: the
  change would never run;
- two members that both replace a seam (``skip-untracked`` and ``burn-0.20-pre.1`` both
  rewrite ``register_untracked``) conflict: one :class:`~sim.errors.UserError` naming
  the seam and both policies, never a silent choice of one;
- mirror classes (:mod:`sim.policies.mirror`) compose the same way, method by method: a
  class only one member replaces is that member's; several members' subclasses of the
  same class become one subclass of them all (``periodic-sweep``'s and
  ``drop-release``'s ``GraphMutexClient``, whose ``register`` each extends with
  ``super()``), and two that both replace one method without ``super()`` conflict: one
  error naming the class and the method. A member that changes a mirror method reached
  only through a seam (``dedup-sweep``'s ``GraphCleaner.cleanup_orphaned_entries``) beside
  one whose seam no longer reaches it (``burn-0.20-pre.1``'s ``after_backward``) conflicts
  as a bypassed seam does.

The reference (``burn-0.22.1``, every seam burn's) and a policy of another framework
(``pytorch``) are not fixes of burn and take no part in a composition.

Examples
--------
>>> from sim.policies import get_policy
>>> cls = get_policy("skip-untracked+drop-release")
>>> cls.name, cls.members
('skip-untracked+drop-release', ('skip-untracked', 'drop-release'))
>>> get_policy("skip-untracked+burn-0.20-pre.1")  # doctest: +ELLIPSIS
Traceback (most recent call last):
sim.errors.UserError: policies skip-untracked and burn-0.20-pre.1 both replace the seam register_untracked ...
>>> get_policy("periodic-sweep+drop-release").GraphMutexClient.__mro__[1:3]
(<class 'sim.policies.periodic_sweep.PeriodicSweepClient'>, <class 'sim.policies.drop_release.DropReleaseClient'>)
"""

from __future__ import annotations

import itertools

from ..errors import UserError
from .base import Policy
from .mirror import MIRROR, overridden, replaced

__all__ = ["compose", "overrides", "extends"]

#: seams composed by a rule of their own rather than by method order
_COMBINED = {"may_compact"}


def _function(value):
    """The function behind a class attribute (a wrapper's original, a static method's
    function), or the value itself."""
    value = getattr(value, "__func__", value)
    return getattr(value, "__wrapped__", value)


def _resolved(cls, name):
    """The function ``cls`` resolves ``name`` to, or None where it is :class:`Policy`'s
    (or object's) own."""
    for klass in cls.__mro__:
        if name in vars(klass):
            if klass is Policy or klass is object:
                return None
            func = _function(vars(klass)[name])
            return None if func is _function(vars(Policy).get(name)) else func
    return None


def overrides(cls, name) -> bool:
    """Whether policy class ``cls`` changes seam or hook ``name`` from burn 0.22.1's.

    >>> from sim.policies import POLICIES
    >>> overrides(POLICIES["skip-untracked"], "register_untracked")
    True
    >>> overrides(POLICIES["skip-untracked"], "after_backward")
    False
    """
    return _resolved(cls, name) is not None


def extends(cls, name) -> bool:
    """Whether ``cls``'s override of ``name`` calls ``super()`` (adds to the seam rather
    than replacing it).

    >>> from sim.policies import POLICIES
    >>> extends(POLICIES["drop-release"], "after_backward")
    True
    >>> extends(POLICIES["skip-untracked"], "register_untracked")
    False
    """
    func = _resolved(cls, name)
    code = getattr(func, "__code__", None)
    return code is not None and "super" in code.co_names


def changes(cls, name) -> bool:
    """Whether policy class ``cls`` changes what seam ``name`` does: it overrides the seam,
    or replaces the mirror method of that name which burn's seam reaches
    (``dedup-sweep``'s ``GraphCleaner.cleanup_orphaned_entries``).

    >>> from sim.policies import POLICIES
    >>> changes(POLICIES["dedup-sweep"], "cleanup_orphaned_entries")
    True
    """
    return overrides(cls, name) or any(name in methods for methods in replaced(cls).values())


def _conflict(order, seams):
    """``(seam, a, b)``: the first seam that bases in ``order`` cannot share (two
    overrides that replace it, or one that replaces it before one that extends it),
    or None."""
    for seam in seams:
        if seam in _COMBINED:
            continue
        seen, last = set(), None
        for cls in order:
            func = _resolved(cls, seam)
            if func is None or func in seen:
                continue
            seen.add(func)
            if last is not None:
                return seam, last, cls
            if not extends(cls, seam):
                last = cls
    return _bypassed(order, seams)


def _bypassed(order, seams):
    """``(seam, a, b)`` where ``b`` replaces a seam whose burn body calls ``seam`` (as
    ``after_backward`` calls ``cleanup_orphaned_entries``) with one that does not, while
    ``a`` overrides ``seam``: ``a``'s change would never run. None if there is none."""
    for outer in seams:
        inner = getattr(getattr(Policy, outer, None), "__code__", None)
        if inner is None:
            continue
        for b in order:
            func = _resolved(b, outer)
            if func is None or extends(b, outer):
                continue
            for seam in set(inner.co_names) & set(seams):
                if seam in getattr(func, "__code__", inner).co_names:
                    continue
                for a in order:
                    if a is not b and changes(a, seam):
                        return f"{seam} (its {outer} no longer calls it)", a, b
    return None


def compose(classes, seams):
    """The policy class made of the policy classes ``classes`` (at least two), named
    ``a+b``; ``seams``: the names of the methods a policy may override (the registry's
    seams and hooks); a :class:`~sim.errors.UserError` where they cannot be composed."""
    names = [cls.name for cls in classes]
    label = "+".join(names)
    if len(set(names)) != len(names):
        raise UserError(f"policy {label}: a policy named twice")
    for cls in classes:
        if cls is Policy:
            raise UserError(f"policy {label}: {cls.name} is the reference every fix changes, "
                            f"not a fix to compose; name the fixes only")
        if getattr(cls, "framework", "burn") != "burn":
            raise UserError(f"policy {label}: {cls.name} models {cls.framework}, not a fix "
                            f"of burn; it composes with nothing")
    seams = ["__init__", *seams]
    order, first = None, None
    for candidate in itertools.permutations(classes):
        problem = _conflict(candidate, seams)
        if problem is None:
            order = candidate
            break
        first = first or problem
    if order is None:
        seam, a, b = first
        if "no longer calls" in seam:
            raise UserError(f"policy {b.name} bypasses the seam {seam}, which {a.name} "
                            f"changes: {label} cannot apply both")
        raise UserError(f"policies {a.name} and {b.name} both replace the seam {seam} "
                        f"(neither adds to it with super()): {label} cannot apply both")
    body = {
        "name": label,
        "members": tuple(names),
        "changes": " ".join(f"[{cls.name}] {cls.changes}" for cls in classes),
        "expected": " ".join(f"[{cls.name}] {cls.expected}" for cls in classes),
        "semantic_change": any(cls.semantic_change for cls in classes),
        "history": any(getattr(cls, "history", False) for cls in classes),
        "__module__": __name__,
        "__doc__": f"The policies {', '.join(names)} applied together.",
    }
    compacting = [cls for cls in order if overrides(cls, "may_compact")]
    if len(compacting) > 1:
        body["may_compact"] = lambda self: all(cls.may_compact(self) for cls in compacting)
    for attr in MIRROR:
        mirror = _mirror_class(attr, classes, label)
        if mirror is not None:
            body[attr] = mirror
    try:
        return type("Composed", tuple(order), body)
    except TypeError as exc:       # e.g. one member subclasses another
        raise UserError(f"policy {label}: its policies cannot be combined ({exc})") from None


def _mirror_class(attr, classes, label):
    """The mirror class ``attr`` of the composition of policy classes ``classes``: the one
    member replacement, or a subclass of several members' whose bases are ordered as
    their overrides allow (extending ones first); None where no member replaces it."""
    base = MIRROR[attr][0]
    mine = []
    for cls in classes:
        mirror = getattr(cls, attr, base)
        if mirror is not base and mirror not in mine:
            mine.append(mirror)
    if len(mine) < 2:
        return mine[0] if mine else None
    owner = {mirror: next(cls for cls in classes if getattr(cls, attr) is mirror)
             for mirror in mine}
    methods = {name for mirror in mine for name in overridden(mirror, attr)}
    first = None
    for candidate in itertools.permutations(mine):
        problem = _method_conflict(candidate, methods, attr)
        if problem is None:
            try:
                return type(base.__name__, candidate, {
                    "__module__": __name__, "__slots__": (),
                    "__doc__": f"{base.__name__} of the policies {label}."})
            except TypeError as exc:
                raise UserError(f"policy {label}: its {attr} classes cannot be combined "
                                f"({exc})") from None
        first = first or problem
    method, a, b = first
    raise UserError(f"policies {owner[a].name} and {owner[b].name} both replace the method "
                    f"{attr}.{method} (neither adds to it with super()): {label} cannot apply "
                    f"both")


def _method_conflict(order, methods, attr):
    """``(method, a, b)``: the first of ``methods`` that the mirror classes in ``order``
    cannot share (two that replace it, or one that replaces it before one that extends
    it), or None."""
    for method in sorted(methods):
        last = None
        for mirror in order:
            if method not in overridden(mirror, attr):
                continue
            if last is not None:
                return method, last, mirror
            func = getattr(mirror, method)
            code = getattr(getattr(func, "__func__", func), "__code__", None)
            if code is None or "super" not in code.co_names:
                last = mirror
    return None
