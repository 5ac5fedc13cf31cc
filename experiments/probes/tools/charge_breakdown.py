"""The simulated time of one run split by what charged it: every ``Timing`` method and the
simulation's page, text and rehash charges, each call's picoseconds credited to the
outermost charging call (a method that calls another is counted once). Exact mode.

Usage: PYTHONPATH=.:experiments python experiments/probes/tools/charge_breakdown.py \
           WORKLOAD VARIANT POLICY PROFILE [KEY=VALUE ...]
e.g. ``op-cost untracked/relu drop-release amd-epyc-zen4 iterations=2000``; run it twice with
a loop count apart and subtract to read the charges of one iteration (session 56: a
released untracked op under drop-release is charged register_ns + drop_release_node_ns,
558 + 274 ns, where unpatched burn's is charged register_ns + its page faults)."""
import collections
import functools
import inspect
import sys

from sim.engine import simulation as S
from sim.engine.runner import run_cell
from sim.platform import timing as T

credited = collections.Counter()
calls = collections.Counter()
depth = [0]


def _wrap(cls, name):
    method = getattr(cls, name)

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        sim = self if isinstance(self, S.Simulation) else self.sim
        outer = depth[0] == 0
        before = sim.work_ps
        depth[0] += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if outer:
                credited[name] += sim.work_ps - before
                calls[name] += 1
    setattr(cls, name, wrapped)


for name, _ in inspect.getmembers(T.Timing, inspect.isfunction):
    if (not name.startswith("_") and name != "lookup_ns"
            and not isinstance(inspect.getattr_static(T.Timing, name),
                               (staticmethod, classmethod))):
        _wrap(T.Timing, name)
for name in ("page_fault", "rehash", "text_fault"):
    _wrap(S.Simulation, name)

workload, variant, policy, profile = sys.argv[1:5]
sets = dict(arg.split("=", 1) for arg in sys.argv[5:])
keep = []
run_cell(workload, variant, policy, profile, sets=sets, fast_forward=False, keep=keep)
total = keep[0].work_ps
print(f"{workload} {variant} {policy} {profile}: {total / 1e6:.3f} us simulated")
for name, ps in credited.most_common():
    print(f"  {name:24s} {ps / 1e6:12.3f} us  {calls[name]} calls")
print(f"  {'(outside Timing)':24s} {(total - sum(credited.values())) / 1e6:12.3f} us")
