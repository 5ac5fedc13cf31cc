"""sweep-every-4: burn's orphan sweep after every 4th backward instead of after each.

An example of a fix written as a policy file, run with ``--policy`` and this file's
path (``sim run p10-ema --policy experiments/policies/sweep_every_4.py``). A policy
overrides the seams of :class:`sim.policies.Policy` it changes; ``sim policies``
lists them with the burn code each one stands for.
"""

from sim.policies import Policy

#: backwards per orphan sweep
EVERY = 4


class SweepEvery4(Policy):
    name = "sweep-every-4"
    changes = (f"GraphMutexClient::backward counts backwards and calls "
               f"cleanup_orphaned_entries after every {EVERY}th one instead of after each; "
               f"free_unavailable_nodes still runs on every backwarded graph.")
    expected = (f"EMA detach: the sweep's cost, quadratic in the chain, is paid every {EVERY}th "
                f"step only; graphs orphaned in between live up to {EVERY - 1} backwards longer.")

    def __init__(self, sim):
        super().__init__(sim)
        self.backwards = 0

    def after_backward(self, client) -> None:
        self.backwards += 1
        if self.backwards % EVERY == 0:
            client.cleanup_orphaned_entries()

