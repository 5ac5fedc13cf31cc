"""Helpers shared by the seed workloads (not a workload itself)."""

import heapq

from sim.platform.vec import RustVec
from sim.burn.tensor import Tensor


def adleak_operands(device, elements=16, tracked=False):
    """The seed adleak loop's operands on ``device``: ``a`` (ones) and ``b`` (twos) of
    ``elements`` floats, ``a`` a leaf requiring grad when ``tracked``."""
    a = Tensor.from_floats([1.0] * elements, device)
    b = Tensor.from_floats([2.0] * elements, device)
    return (a.require_grad() if tracked else a), b


def tiny_backward(device, probe=False):
    """An unrelated 1-element graph and one backward (the seeds' ``tiny_backward(&device)``).

    ``probe``: the Linux probe's ``tiny_backward()`` (``adleak.rs``), which makes its own
    ``Device::flex().autodiff()`` (the boxed inner device, dropped last) and binds the
    gradients (``let grads = (x.clone() * 2.0).sum().backward()``: the clone moves into
    the mul, the product into the sum, and the loss, a temporary of the ``let``, drops
    before the gradients)."""
    if not probe:
        x = Tensor.from_floats([1.0], device).require_grad()
        loss = (x.clone() * 2.0).sum()
        loss.backward()
        return
    heap = device.sim.heap
    nbytes = device.sim.layout.device_box_bytes if device.is_autodiff else 0
    box = heap.alloc(nbytes) if nbytes else None
    x = Tensor.from_floats([1.0], device).require_grad()
    loss = (x.clone().move() * 2.0).move().sum()
    grads = loss.backward()
    del loss
    del grads
    del x
    if nbytes:
        heap.free(nbytes, box)


MiB = 1024 * 1024


def pit_groups(infer, model, autodiff, plain, variant):
    """The seed's pit-infer groups in sequence, up to ``variant``'s: A (``model`` and the
    input on ``autodiff``), B (``model.valid()``, the input still on ``autodiff``), C (the
    valid model, the input on ``plain``); ``infer(group, net, input_device)`` is the
    generator of one group. Returns the valid model after C (for what follows the groups
    while it lives), else None."""
    yield from infer("A-model-and-input-autodiff", model, autodiff)
    if variant == "A-model-and-input-autodiff":
        return
    valid = model.valid()
    yield from infer("B-valid-model-input-autodiff", valid, autodiff)
    if variant == "B-valid-model-input-autodiff":
        return
    yield from infer("C-valid-model-input-plain", valid, plain)
    return valid


def gpu_pool_metrics(gpu) -> dict:
    """The GPU probes' pool rows (gpu-probes ``Sink::pool``): burn's ``memory_pool_usage``
    and ``memory_pool_report`` of ``gpu`` as metrics, bytes and pages."""
    (allocs, in_use, pad, reserved), report = gpu.memory_pool_details()
    sliced = sum(size * pages for size, pages in report)
    (small_size, small_pages), (arena_size, arena_pages) = report[:2]
    outdated = report[2:]
    return {
        "gpu_in_use": in_use / MiB, "gpu_reserved": reserved / MiB,
        "gpu_in_use_bytes": in_use, "gpu_reserved_bytes": reserved,
        "gpu_padding_bytes": pad, "gpu_allocs": allocs,
        "gpu_pages_small": small_pages, "gpu_page_bytes_small": small_size,
        "gpu_pages_arena": arena_pages, "gpu_page_bytes_arena": arena_size,
        "gpu_pages_outdated": sum(p for _, p in outdated),
        "gpu_outdated_reserved_bytes": sum(s * p for s, p in outdated),
        "gpu_other_reserved_bytes": reserved - sliced,
    }


def rss_bytes_paged(sim):
    """Process RSS in bytes as the OS reports it: whole pages of the platform allocator's
    page size (the probes' `rss_bytes` rows: /proc/self/statm pages x page size)."""
    page = sim.allocator.page_bytes
    return -(-sim.rss_bytes() // page) * page


class ProbeSink:
    """The Linux probe's CSV sink (``burn-probes`` ``csv.rs``, ``Sink::row``), whose rows
    stay in memory until the probe ends: every report leaves small blocks behind in the
    measured process's heap (the rows' strings, the rows' ``Vec``), which decide where
    glibc's arena can still merge and trim. The seeds' program printed its lines instead
    (nothing kept); a workload replicating a Linux probe records its report rows here.

    One row's heap events, in the probe's order: the value formatted by ``f()`` (a
    ``format!`` ``String``: capacity max(8, length); integers are passed as they are), the
    ``Row``'s nine ``String`` s (note, experiment, variant, phase, x, x unit, metric, value,
    unit: exactly their lengths, nothing for an empty one), the echo's first 70
    characters of the note (``collect`` from a capacity of a quarter of the note's bytes,
    grown by doubling, freed), the row pushed onto the ``Vec<Row>`` (216 B a row, grown by
    ``realloc``), then the formatted value freed. ``note_suffix``: what the probe adds to
    every note (Adam's run appends its config; an empty note becomes the config). The
    probe keeps these blocks out of its counting allocator's snapshots (``alloc::exclude``):
    they are placed on the heap but not counted (:meth:`sim.platform.heap.Heap.excluded`),
    except the formatted value's allocation (:meth:`row`)."""

    ROW_BYTES = 9 * 24
    #: the steps whose parts the probe names (``show`` in ema.rs)
    SHOWN = (1, 2, 3, 50)
    #: a workload's ``sink`` parameter
    CHOICES = ("auto", "print", "probe")

    def __init__(self, sim, experiment, variant, note_suffix=""):
        self.sim = sim
        self.heap = sim.heap.excluded()
        self.experiment, self.variant, self.suffix = experiment, variant, note_suffix
        self.rows = RustVec(self.heap, self.ROW_BYTES)

    @classmethod
    def for_run(cls, sim, sink, experiment, variant, note_suffix=""):
        """The sink a workload's ``sink`` parameter asks for, or None (``print``): ``auto``
        is ``probe`` on a Linux profile (its ``[meta] platform``, whatever the profile's
        name: one ``sim host-profile`` wrote is named after its host), the platform the
        probes measured on."""
        if sink == "auto":
            platform = str(sim.profile.data["meta"]["platform"])
            sink = "probe" if platform.startswith("linux") else "print"
        return cls(sim, experiment, variant, note_suffix) if sink == "probe" else None

    def phase(self, step, name) -> None:
        """The probe's ``ph(&format!("{step} {name}"))`` after a part of a step it shows
        (:data:`SHOWN`): the label is formatted and dropped whether or not the phases are
        printed. Counted (the probe does not exclude it): ``format!`` starts from an
        empty ``String`` here (its one literal piece is short and follows the argument),
        the step's digits grow it to 8 bytes, the name may grow it again."""
        if step in self.SHOWN:
            label = RustVec(self.sim.heap, 1, length=0)
            label.push(len(str(step)))
            label.push(1 + len(name))
            label.drop()

    #: bytes of the /proc/self/statm line the probe reads (31 in the malloc logs)
    STATM_BYTES = 31

    def read_rss(self) -> None:
        """The probe's ``rss_bytes()``: ``fs::read_to_string("/proc/self/statm")`` (procfs
        reports no size: std's first small read fills a ``String`` of exactly the line,
        the next reserves 32 bytes more and reads nothing), parsed and freed. Counted,
        and freed before the snapshot that follows."""
        heap = self.sim.heap
        line = self.STATM_BYTES
        heap.free(line + 32, heap.realloc(line, line + 32, heap.alloc(line)))

    def format_note(self, length, literal_bytes):
        """A ``format!`` of a report's note (``length`` bytes, ``literal_bytes`` of them in
        its literal pieces), made outside ``alloc::exclude`` and dropped after the rows
        (:meth:`drop_note`): ``Arguments::estimated_capacity`` reserves twice the literal
        bytes, and the ``String`` grows once if the text needs more. Returns the block
        (capacity, handle)."""
        heap = self.sim.heap
        capacity = 2 * literal_bytes
        block = heap.alloc(capacity)
        if length > capacity:
            grown = max(2 * capacity, length)
            block = heap.realloc(capacity, grown, block)
            capacity = grown
        return capacity, block

    def drop_note(self, note) -> None:
        self.sim.heap.free(*note)

    def loop_stops(self) -> tuple:
        """Steps after which a loop of identical steps must stop (a shown step differs
        from its neighbours): 3, then 49 and 50."""
        return (3, 49, 50)

    def formatted(self, value, digits):
        """The probe's ``f(value, digits)`` made ahead of the rows: ``(text, block)``, a
        ``format!`` ``String`` (capacity max(8, length)) to :meth:`drop` later."""
        text = f"{value:.{digits}f}"
        return text, self.heap.alloc(max(8, len(text)))

    def drop(self, formatted) -> None:
        text, block = formatted
        self.heap.free(max(8, len(text)), block)

    def row(self, x, metric, value, unit, note="", digits=None, x_unit="step", phase=""):
        """Record one row; ``value`` is formatted with ``digits`` decimals when given
        (the probe's ``f``), else as it is (an integer's ``to_string``, or a string
        :meth:`formatted` made). The probe formats ``f``'s ``String`` as it calls
        ``Sink::row``, outside ``alloc::exclude`` (counted), and the row drops it as it
        returns, inside (the free is not counted): each such value leaves one block and
        its bytes in the probe's live-heap counts."""
        heap = self.heap
        if self.suffix:
            note = f"{note}; {self.suffix}" if note else self.suffix
        text = f"{value:.{digits}f}" if digits is not None else str(value)
        temp = self.sim.heap.alloc(max(8, len(text))) if digits is not None else None
        for field in (note, self.experiment, self.variant, phase, str(x), x_unit, metric,
                      text, unit):
            if field:
                heap.alloc(len(field.encode()))
        if note:
            short = min(len(note), 70)
            echo = RustVec(heap, 1, capacity=min(70, -(-len(note.encode()) // 4)), length=0)
            echo.push_each(short)
            echo.drop()
        self.rows.push_each(1)
        if digits is not None:
            heap.free(max(8, len(text)), temp)   # row_inner's parameter, after the push


def event_steps(last, *periods):
    """The steps up to ``last`` at which a probe does something (reports, validates):
    every multiple of each period, and ``last`` itself, ascending, each once. Made as the
    loop reaches them, so a run of 10**30 steps starts at once and its time budget stops
    it (a set of the steps was built in one call no alarm interrupts).

    >>> list(event_steps(10, 4, 6)), list(event_steps(3, 5))
    ([4, 6, 8, 10], [3])
    """
    previous = None
    for step in heapq.merge(*(range(p, last + 1, p) for p in periods), (last,)):
        if step != previous:
            yield step
            previous = step
