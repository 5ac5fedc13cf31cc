"""``burn-0.20-pre.1``: PR #3957's untracked-node set (v0.20.0-pre.1/pre.2).

``GraphMutexClient::register_untracked`` registered the step as usual and also
put its id in ``GraphLocator.untracked_nodes``; at the end of every backward the
whole set was emptied and each id's locator entry removed (dropping the op's
single-node graph). There was no orphan sweep yet (PR #4039 replaced the set by
``cleanup_orphaned_entries``). Release still happens only at backward.
"""

from __future__ import annotations

from ..burn.graph.runs import NodeRun
from .base import Policy

__all__ = ["Burn020Pre1"]


class Burn020Pre1(Policy):
    name = "burn-0.20-pre.1"
    history = True
    changes = ("GraphMutexClient::register_untracked registers the step and adds its id to a "
               "GraphLocator.untracked_nodes HashSet; the end of each backward removes every id "
               "in it from the locator (remove_entry) instead of running "
               "cleanup_orphaned_entries.")
    expected = ("Frees untracked records at each backward without scanning every entry; "
                "nothing is freed in a loop that never calls backward; abandoned tracked graphs "
                "are never swept.")

    def __init__(self, sim):
        super().__init__(sim)
        # the set's ids: one per untracked node; a run of dead single-node graphs that
        # fast-forward applied in closed form is one item (its members' ids)
        self.untracked_nodes = []
        self.ids = 0   # ids in the set (a run's members counted one by one)
        self.table = sim.tables.key_set()

    def register_untracked(self, client, rc, step, device) -> None:
        client.register(rc, step)
        self.untracked_nodes.append(rc.id)
        self.ids += 1
        self.table.fit(self.ids)
        self.sim.charge(self.sim.profile.time["register_ns"] * 0.25)

    def may_compact(self) -> bool:
        return False  # untracked_nodes lists ids that remove_entry must still find

    def after_backward(self, client) -> None:
        ids, self.untracked_nodes = self.untracked_nodes, []
        self.ids = 0
        self.table.drop()
        locator = client.locator
        freed = 0
        # one batch of BTreeMap removals, in the set's order (the trees end as with one
        # removal at a time; where nearly every key goes, without replaying the runs)
        with locator.counted_removals():
            for item in ids:
                if isinstance(item, NodeRun):
                    locator.remove_run(item)
                    freed += item.count
                else:
                    locator.remove_entry(item)
                    freed += 1
        self.sim.timing.sweep(entries=0, visits=freed, scanned=0, freed=freed)
