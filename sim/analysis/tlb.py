"""The data TLB's size and cost per read from the sweep-scan probe's ``tlb`` output.

``sweep-scan tlb`` (``experiments/probes/cache-bw``) prints on stderr what cpuid says of the
core's L2 data TLB for 4-KiB pages (AMD leaf 0x80000006: entries and an associativity code)
and writes CSV rows ``pattern,n,ns``: ``maybe_useful``'s key reads with every key on a 4-KiB
page of its own (``pages4k``) and the same lines packed 64 to a page (``lines4k``, no TLB
miss). A read whose page misses the TLB costs the median of ``pages4k - lines4k`` over the
sizes whose pages are 2x to 32x the TLB's entries (every read misses there). No fit.

:func:`read_tlb_dir` reads a directory holding ``tlb.csv`` and ``tlb.stderr`` (and, for the
host, ``lscpu.txt`` or a ``host:`` line of the stderr; runs appended to ``tlb.csv``, each
with its header, enter as the mean of each row over the runs); ``sim calibrate --tlb DIR`` writes
the result into a profile's ``[process] dtlb_entries``/``dtlb_ways`` and ``[time]
sweep_tlb_read_ns``.

``sweep-scan tlbr R FILL P,...`` reads keys ``R`` to a page on ``P`` pages filling a share
``FILL`` of their span, in one random order every pass (``spread4k``), against the same keys
packed 64 to a page (``lines4k``). :func:`read_tlbr_dir` turns the rows of a ``tlbr/``
directory beside ``tlb.csv`` into the TLB's measured miss curves
(:class:`sim.platform.l2_cache.TlbMissCurve`): for each ``R``, at each ``P``, the pages read
(the key pages and the 32-B table slots of their keys, as the sweep's model counts a working
set) over the TLB's entries, and the fraction of reads that miss, ``(spread4k - lines4k) /
ns`` (``ns``: the cost of a miss from the ``tlb`` rows), the mean over the runs and files of
that ``R`` whose pages fill at least :data:`MIN_FILL` of their span (dense pages, as the
heap's are: there where they fall does not change the misses, the probe's 63 % and 100 %
rows agree within their spread; pages in regions of their own miss earlier and cost more a
miss, a layout the chains do not have). No fit.

``sweep-scan order LAYOUT FRACS P,...`` reads a chain's keys in the orphan sweep's own order
and at its spacing: the keys at the addresses the simulated glibc arena gave an EMA chain's
keys (LAYOUT), the graph at ``P`` key pages, a hashbrown ``nodes`` table over them walked in
bucket order up to the live key at a share ``f`` of it, once per locator entry
(``order4k``), against the same with the keys packed 64 to a page (``orderln``).
:func:`read_order_dir` turns the rows of an ``order/`` directory into miss curves of the
same kind, one per ``f``, each point where the sweep's model reads its curve for that pass
(:func:`sim.platform.l2_cache.sweep_tlb_point`: the pages read over the TLB's entries, the
reads per page, from the chain's keys, pages, table and the keys read), the fraction of reads
that miss ``(order4k - orderln) / ns``, the mean over the runs. No fit. Where the directory
holds the rows of several layouts (each file one layout, named by its keys' spacing,
:func:`layout_spacing`), each layout gives its own curves and ``spacing`` names the layout of
each (``[time] sweep_tlb_order_spacing``; :class:`sim.platform.l2_cache.TlbLayoutCurves`).
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from ..errors import UserError
from .data import probe_csv_rows
from ..platform.l2_cache import sweep_tlb_point

__all__ = ["AMD_WAYS", "MIN_FILL", "parse_cpuid_line", "tlb_read_cost", "read_tlb_dir",
           "tlbr_curves", "read_tlbr_dir", "order_curves", "read_order_dir",
           "layout_spacing"]

#: AMD's associativity codes of cpuid 0x80000006's TLB fields (AMD64 APM vol. 3, CPUID
#: Fn8000_0006, the L2 TLB associativity encoding); 0xF (fully associative) as 0
AMD_WAYS = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 8: 16, 0xA: 32, 0xB: 48, 0xC: 64, 0xD: 96,
            0xE: 128}

_CPUID = re.compile(r"cpuid 0x80000006: L2 DTLB 4K (\d+) entries, associativity code (\d+)")


def parse_cpuid_line(text):
    """``(entries, ways)`` from the probe's cpuid line in ``text``, or None.

    >>> parse_cpuid_line("cpuid 0x80000006: L2 DTLB 4K 3072 entries, associativity code 6")
    (3072, 8)
    """
    found = _CPUID.search(text)
    if not found:
        return None
    entries, code = int(found.group(1)), int(found.group(2))
    if code not in AMD_WAYS:
        raise UserError(f"cpuid 0x80000006: associativity code {code} is not a set-associative "
                        "TLB this model knows (AMD_WAYS)")
    return entries, AMD_WAYS[code]


def tlb_read_cost(rows, entries, name="tlb.csv"):
    """``(ns, sizes)``: the median of ``pages4k - lines4k`` (``rows``: pattern -> n -> ns)
    over the sizes ``n`` from 2x to 32x ``entries``, and how many sizes that was; where
    there is none, or the median is not a cost, one error naming the file (``name``).

    >>> rows = {"pages4k": {4096: 5.0, 8192: 7.0, 16384: 8.0}, "lines4k": {4096: 1.0, 8192: 1.0, 16384: 1.0}}
    >>> tlb_read_cost(rows, 3072)
    (6.5, 2)
    """
    pages4k, lines4k = rows.get("pages4k", {}), rows.get("lines4k", {})
    diffs = [pages4k[n] - lines4k[n] for n in sorted(pages4k)
             if n in lines4k and 2 * entries <= n <= 32 * entries]
    if not diffs:
        raise UserError(f"{name}: no pages4k and lines4k rows at {2 * entries}-"
                        f"{32 * entries} pages (2x to 32x the TLB's entries)")
    ns = statistics.median(diffs)
    if not ns > 0:
        raise UserError(f"{name}: pages4k rows are not slower than lines4k rows at {2 * entries}-"
                        f"{32 * entries} pages (median {ns:g} ns): no cost of a TLB miss")
    return ns, len(diffs)


def _text(path) -> str:
    """The text of the probe's file ``path``; one error naming it where it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read it as text ({e})") from None


def _host(directory, stderr_text) -> str:
    found = re.search(r"^host: (.+)$", stderr_text, re.M)
    if found:
        return found.group(1).strip()
    lscpu = directory / "lscpu.txt"
    if lscpu.is_file():
        fields = {}
        for line in _text(lscpu).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
        name = fields.get("Model name", "")
        if name:
            return (f"{name} (family {fields.get('CPU family', '?')} model "
                    f"{fields.get('Model', '?')})")
    raise UserError(f"{directory}: no host named (a 'host:' line in tlb.stderr, or lscpu.txt)")


def _time_ns(row, where) -> float:
    """A probe row's ``ns`` (ns per read): a finite time of 0 or more, else one error naming
    ``where`` (the file, and its line where known)."""
    ns = float(row["ns"])
    if not (math.isfinite(ns) and ns >= 0):
        raise UserError(f"{where}: ns must be a finite time of 0 or more (ns per read), "
                        f"not {row['ns']!r}")
    return ns


def read_tlb_dir(directory) -> dict:
    """The TLB's ``entries``, ``ways`` and ``ns`` (cost per read that misses it), the
    ``sizes`` the cost is the median over, the ``host`` and the files read, from a directory
    of the probe's output (module docstring)."""
    directory = Path(directory)
    csv_path, err_path = directory / "tlb.csv", directory / "tlb.stderr"
    for path in (csv_path, err_path):
        if not path.is_file():
            raise UserError(f"--tlb {directory}: no {path.name} (the output of `sweep-scan tlb`)")
    text = _text(err_path)
    tlb = parse_cpuid_line(text)
    if tlb is None:
        raise UserError(f"{err_path}: no cpuid 0x80000006 line (sweep-scan tlb on x86_64)")
    runs = {}
    for line, row, (pattern, n, ns) in probe_csv_rows(
            csv_path, "pattern,n,ns", lambda row: (row["pattern"], int(row["n"]), float(row["ns"]))):
        runs.setdefault(pattern, {}).setdefault(n, []).append(_time_ns(row, f"{csv_path}:{line}"))
    rows = {pattern: {n: sum(v) / len(v) for n, v in by_n.items()}
            for pattern, by_n in runs.items()}
    entries, ways = tlb
    ns, sizes = tlb_read_cost(rows, entries, csv_path)
    return {"entries": entries, "ways": ways, "ns": ns, "sizes": sizes,
            "host": _host(directory, text), "csv": csv_path, "stderr": err_path}


#: the share of their span a ``tlbr`` run's key pages must fill to enter the miss curves
MIN_FILL = 0.5
#: B of a ``nodes`` table slot per key in the ``tlbr`` rows (the probe's table: hashbrown's
#: 32-B slots), counted in the pages read as the sweep's model counts them
SLOT_BYTES = 32
PAGE_BYTES = 4096


def tlbr_curves(rows, entries, ns):
    """``(reads, reach, miss)``: the miss curves (module docstring) of ``rows``, dicts of a
    ``tlbr`` CSV's columns (``pattern, pages, per_page, fill, keys, ns``), for a TLB of
    ``entries`` entries whose miss costs ``ns``.

    >>> rows = [dict(pattern=p, pages=3072, per_page=10, fill=f, ns=v) for p, f, v in
    ...         (("spread4k", 1, 1.5), ("lines4k", 1, 1.0), ("spread4k", 0.63, 1.7),
    ...          ("lines4k", 0.63, 1.0), ("spread4k", 0.005, 4.0), ("lines4k", 0.005, 1.0))]
    >>> tlbr_curves(rows, 3072, 5.0)
    ([10.0], [[1.0781]], [[0.12]])
    """
    runs = {}
    for row in rows:
        if float(row["fill"]) < MIN_FILL:
            continue
        key = (int(row["per_page"]), int(row["pages"]))
        runs.setdefault(key, {}).setdefault(row["pattern"], []).append(float(row["ns"]))
    curves = {}
    for (per_page, pages), ns_of in sorted(runs.items()):
        if "spread4k" not in ns_of or "lines4k" not in ns_of:
            continue
        spread = sum(ns_of["spread4k"]) / len(ns_of["spread4k"])
        lines = sum(ns_of["lines4k"]) / len(ns_of["lines4k"])
        read = pages * (1 + per_page * SLOT_BYTES / PAGE_BYTES)
        curve = curves.setdefault(float(per_page), ([], []))
        curve[0].append(round(read / entries, 4))
        curve[1].append(round(min(1.0, max(0.0, (spread - lines) / ns)), 3))
    reads = sorted(curves)
    return reads, [curves[r][0] for r in reads], [curves[r][1] for r in reads]


def _csv_rows(directory, columns, check):
    """``(rows, files)``: the rows of every ``*.csv`` in ``directory`` (a run appended to a file
    repeats the header: skipped) and the files that gave one ``check(row, path)`` true; a row
    ``check`` cannot read is one error naming the file, its line and the ``columns``
    expected (:func:`sim.analysis.data.probe_csv_rows`)."""
    rows, files = [], []
    for path in sorted(Path(directory).glob("*.csv")):
        got = []
        for _, row, counts in probe_csv_rows(path, columns, lambda row: check(row, path)):
            got.append(row)
            if counts and path not in files:
                files.append(path)
        if got and "keys" in got[0] and "frac" in got[0]:
            spacing = layout_spacing(got)   # an ``order`` file: the layout its rows read
            for row in got:
                row["_layout"] = spacing
        rows += got
    return rows, files


def read_tlbr_dir(directory, entries, ns) -> dict:
    """The miss curves (:func:`tlbr_curves`) of every ``*.csv`` of the ``tlbr`` rows in
    ``directory`` (a run appended to a file repeats the header: skipped), and the files
    whose rows entered them; None where ``directory`` is not a directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return None

    def check(row, path):
        _time_ns(row, path), int(row["pages"]), int(row["per_page"])
        return float(row["fill"]) >= MIN_FILL

    rows, files = _csv_rows(directory, "pattern,pages,per_page,fill,keys,ns", check)
    reads, reach, miss = tlbr_curves(rows, entries, ns)
    if not reads:
        raise UserError(f"{directory}: no tlbr rows of pages filling at least {MIN_FILL:g} "
                        "of their span with both spread4k and lines4k")
    return {"reads": reads, "reach": reach, "miss": miss, "files": files}


def _table_bytes(keys, slot=SLOT_BYTES, group=16) -> int:
    """hashbrown's block for ``keys`` entries of ``slot`` B: power-of-two buckets at most 7/8
    full (3 of 4 below 8), the slots, a control byte each and one more group."""
    buckets = 4
    while keys > (buckets - 1 if buckets < 8 else buckets // 8 * 7):
        buckets *= 2
    return buckets * slot + buckets + group


def order_curves(rows, entries, ns):
    """``(reads, reach, miss)``: the miss curves (module docstring) of ``rows``, dicts of an
    ``order`` CSV's columns (``pattern, pages, keys, frac, prefix, touched, table_pages,
    ns``), for a TLB of ``entries`` entries whose miss costs ``ns``: one curve per ``frac``,
    its reads per page the mean of its points' (ascending by it; a curve whose mean would
    repeat another's is left out).

    >>> rows = [dict(pattern=p, pages=pg, keys=8 * pg, frac=1.0, prefix=8 * pg, ns=v)
    ...         for p, pg, v in (("order4k", 1024, 1.0), ("orderln", 1024, 1.0),
    ...                          ("order4k", 4096, 3.0), ("orderln", 4096, 1.0))]
    >>> order_curves(rows, 3072, 5.0)
    ([8.0], [[0.3763, 1.5052]], [[0.0, 0.4]])
    """
    runs = {}
    for row in rows:
        key = (float(row["frac"]), int(row["pages"]), int(row["keys"]), int(row["prefix"]))
        runs.setdefault(key, {}).setdefault(row["pattern"], []).append(float(row["ns"]))
    curves = {}
    for (frac, pages, keys, prefix), ns_of in sorted(runs.items()):
        if "order4k" not in ns_of or "orderln" not in ns_of:
            continue
        spread = sum(ns_of["order4k"]) / len(ns_of["order4k"])
        lines = sum(ns_of["orderln"]) / len(ns_of["orderln"])
        x, reads = sweep_tlb_point(prefix, keys, pages * PAGE_BYTES / keys, _table_bytes(keys),
                                   entries * PAGE_BYTES, PAGE_BYTES)
        curve = curves.setdefault(frac, ([], [], []))
        curve[0].append(reads)
        curve[1].append(round(x, 4))
        curve[2].append(round(min(1.0, max(0.0, (spread - lines) / ns)), 3))
    out = []
    for frac in sorted(curves):
        r, x, m = curves[frac]
        order = sorted(range(len(x)), key=x.__getitem__)
        xs = [x[i] for i in order]
        if len(set(xs)) != len(xs):
            continue
        out.append((round(max(1.0, sum(r) / len(r)), 3), xs, [m[i] for i in order]))
    out.sort()
    kept = [c for i, c in enumerate(out) if i == 0 or c[0] > out[i - 1][0]]
    return [c[0] for c in kept], [c[1] for c in kept], [c[2] for c in kept]


def read_order_dir(directory, entries, ns) -> dict:
    """The miss curves in the sweep's own order (:func:`order_curves`) of every ``*.csv`` of
    the ``order`` rows in ``directory`` (a run appended to a file repeats the header:
    skipped), and the files read; None where ``directory`` is not a directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return None

    def check(row, path):
        _time_ns(row, path), float(row["frac"]), int(row["pages"]), int(row["prefix"])
        if (row["pattern"] not in ("order4k", "orderln") or int(row["pages"]) < 1
                or not 1 <= int(row["prefix"]) <= int(row["keys"])):
            raise UserError(f"{path}: a row of pattern {row['pattern']!r} on {row['pages']} "
                            f"pages with {row['prefix']} of {row['keys']} keys read (order4k "
                            f"or orderln, at least 1 page, 1 to all keys read)")
        return True

    rows, files = _csv_rows(directory, "pattern,pages,keys,frac,prefix,touched,table_pages,ns",
                            check)
    layouts = {}
    for row in rows:
        layouts.setdefault(row["_layout"], []).append(row)
    out = {"reads": [], "reach": [], "miss": [], "spacing": [], "files": files}
    for spacing in sorted(layouts):
        reads, reach, miss = order_curves(layouts[spacing], entries, ns)
        out["reads"] += reads
        out["reach"] += reach
        out["miss"] += miss
        out["spacing"] += [spacing] * len(reads)
    if not out["reads"]:
        raise UserError(f"{directory}: no order rows with both order4k and orderln")
    if len(layouts) == 1:
        out["spacing"] = []                 # one layout: its curves, no spacing to choose by
    return out


def layout_spacing(rows) -> float:
    """B of heap per key of the layout an ``order`` file's ``rows`` read: the pages over the
    keys of its longest chain (the whole layout), to 0.1 B.

    >>> layout_spacing([dict(pages="1024", keys="7573"), dict(pages="4274", keys="31996")])
    547.1
    """
    longest = max(rows, key=lambda row: int(row["pages"]))
    return round(int(longest["pages"]) * PAGE_BYTES / int(longest["keys"]), 1)
