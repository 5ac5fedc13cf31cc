"""Helpers shared by the seed workloads (not a workload itself)."""

from sim.tensor import Tensor


def tiny_backward(device):
    """An unrelated 1-element graph and one backward (the seeds' ``tiny_backward``)."""
    x = Tensor.from_floats([1.0], device).require_grad()
    loss = (x.clone() * 2.0).sum()
    loss.backward()
