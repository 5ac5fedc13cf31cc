"""Helpers shared by the seed workloads (not a workload itself)."""

from sim.tensor import Tensor


def adleak_operands(device, elements=16, tracked=False):
    """The seed adleak loop's operands on ``device``: ``a`` (ones) and ``b`` (twos) of
    ``elements`` floats, ``a`` a leaf requiring grad when ``tracked``."""
    a = Tensor.from_floats([1.0] * elements, device)
    b = Tensor.from_floats([2.0] * elements, device)
    return (a.require_grad() if tracked else a), b


def tiny_backward(device):
    """An unrelated 1-element graph and one backward (the seeds' ``tiny_backward``)."""
    x = Tensor.from_floats([1.0], device).require_grad()
    loss = (x.clone() * 2.0).sum()
    loss.backward()


def rss_bytes_paged(sim):
    """Process RSS in bytes as the OS reports it: whole pages of the platform allocator's
    page size (the probes' `rss_bytes` rows: /proc/self/statm pages x page size)."""
    page = sim.allocator.page_bytes
    return -(-sim.rss_bytes() // page) * page
