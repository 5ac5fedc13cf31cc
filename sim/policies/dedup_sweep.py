"""``dedup-sweep``: the orphan sweep visits each graph once, with a live-handle count per graph."""

from __future__ import annotations

from .base import Policy

__all__ = ["DedupSweep"]


class DedupSweep(Policy):
    name = "dedup-sweep"
    changes = ("GraphCleaner::cleanup_orphaned_entries iterates the distinct graphs (not a clone "
               "of every locator entry) and GraphMemoryManagement keeps a count of nodes whose "
               "Arc<NodeId> strong count is > 1, so maybe_useful is O(1); a dead graph's "
               "free_unused_roots is repeated until nothing more is freed.")
    expected = ("Sweep cost O(graphs) instead of O(entries x nodes scanned): flat ms/step for "
                "the EMA chain (whose memory still grows, the chain is reachable).")

    def after_backward(self, client) -> None:
        client.cleanup_orphaned_entries(visit_each_entry=False)
