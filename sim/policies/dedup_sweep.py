"""``dedup-sweep``: the orphan sweep visits each graph once, with a live-handle count per graph."""

from __future__ import annotations

from .base import Policy

__all__ = ["DedupSweep"]


class DedupSweep(Policy):
    name = "dedup-sweep"
    changes = ("GraphCleaner::cleanup_orphaned_entries walks the locator's entries once to "
               "collect the distinct graphs (no clone of the map) and visits each graph once: "
               "one maybe_useful scan up to the first live handle, and a dead graph's "
               "free_unused_roots repeated until nothing more is freed "
               "(experiments/patches/dedup-sweep.patch). A per-graph count of live handles, "
               "which would make maybe_useful O(1), needs burn to hear of every handle's "
               "clone and drop (AutodiffTensor has no Drop): not part of this fix.")
    expected = ("Sweep cost O(entries + nodes scanned once) instead of O(entries x nodes "
                "scanned): near-flat ms/step for the EMA chain (whose memory still grows, the "
                "chain is reachable).")

    def cleanup_orphaned_entries(self, client) -> None:
        client.cleanup_orphaned_entries(visit_each_entry=False)
