"""The process's start and the text of a single-row forward, from the train-validate probe's
``PROBE_PARTS`` lines.

With ``PROBE_PARTS=1`` the train-validate probe (``experiments/probes/burn-probes/src/tv.rs``)
prints on stderr, after each part of its run, the process's RSS (``/proc/self/statm``) and the
resident text of its binary (``/proc/self/smaps``), recorded without allocating: a
``PART <name> rss <KiB> d <KiB> text <KiB> ...`` line per part. Two of them set parameters of
the model with no fit:

* ``start``, before any burn code runs: what the process holds before the workload, the
  profile's ``process.baseline_rss_bytes`` (the binary's and libraries' pages the loader and
  Rust's runtime made resident); the mean over the processes;
* ``gen 1`` less ``1 sgd``, in a process run for one training step (``--steps 1``: the
  generation follows step 1 with no validation and no report between them): the text the
  first generation sample faults in (``model.valid()``, its input, a forward of one row,
  ``[1, 128] x [128, 128]``, its sum and ``into_scalar``; of these only gemm's
  matrix-vector kernels are code step 1 did not run), the profile's ``code.gemv_bytes``;
  the mean over the processes. (A longer run's window from ``val done`` to ``gen 1`` also
  holds the probe's first reports and more steps: session 54's 96-132 KiB there were not
  the single-row forward's.)

:func:`parse_part_lines` reads the lines of one process; :func:`write_parts` keeps them as
``parts.csv`` (``variant,run,part,rss_kib,exe_text_kib,host``, the columns of the
diagnostics of session 54, ``experiments/measured/linux-x86_64/diagnostics/
train-validate-parts-s54.csv``, which :func:`read_parts` reads too); ``sim calibrate
--process-parts DIR`` and ``sim host-profile`` write the two values into a profile.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from pathlib import Path

from ..errors import UserError
from .data import probe_csv_rows

__all__ = ["PARTS_FILE", "START", "GEMV", "parse_part_lines", "parts_csv", "read_parts"]

#: the file of a directory ``sim host-profile`` writes the parts into
PARTS_FILE = "parts.csv"
#: the part before any burn code runs
START = "start"
#: the parts around the first single-row forward: (before, after), adjacent in a process
GEMV = ("1 sgd", "gen 1")
_COLUMNS = ("variant", "run", "part", "rss_kib", "exe_text_kib", "host")

_PART = re.compile(r"^PART (?P<name>.+?)\s+rss\s+(?P<rss>[\d.]+)\s+d\s+-?[\d.]+\s+"
                   r"text\s+(?P<text>[\d.]+)\s")


def parse_part_lines(text) -> list:
    """``(part, rss_kib, text_kib)`` of every ``PART`` line of one process's stderr, in order.

    >>> parse_part_lines("PART start        rss    3004.0 d      0.0 text   676.0 d     0.0 "
    ...                  "live 0.0 KiB\\nPART gen 1        rss    6412.0 d   3408.0 text  3188.0 "
    ...                  "d  2512.0 live 1.0 KiB\\nPART end RssAnon 500 KiB RssFile 5900 KiB")
    [('start', 3004.0, 676.0), ('gen 1', 6412.0, 3188.0)]
    """
    out = []
    for line in text.splitlines():
        found = _PART.match(line)
        if found:
            out.append((found["name"], float(found["rss"]), float(found["text"])))
    return out


def parts_csv(processes, host="") -> str:
    """The CSV text of ``processes``: ``(variant, parts)`` per process in run order, ``parts``
    as :func:`parse_part_lines` gives them (runs numbered from 1 per variant)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS)
    runs = {}
    for variant, parts in processes:
        run = runs[variant] = runs.get(variant, 0) + 1
        for name, rss, text in parts:
            writer.writerow((variant, run, name, f"{rss:.1f}", f"{text:.1f}", host))
    return out.getvalue()


#: the largest RSS or text a parts row may give, KiB (1 TiB): a bound on a process, so a
#: corrupt value (nan, inf, 1e300) is an error rather than a profile value
MAX_KIB = 1 << 30


def read_parts(path) -> dict:
    """From a parts CSV (a directory: its :data:`PARTS_FILE`): ``start_bytes`` (the mean RSS
    at :data:`START`), ``gemv_bytes`` (the mean resident text the first single-row forward
    adds: :data:`GEMV`'s second part less its first, where it follows the first), the
    per-process values behind each (``starts``, ``gemvs``, KiB),
    the ``host`` (the file's ``host`` column, or ``""``) and the ``file`` read.

    One clear error for a file that is missing, lacks the columns, or has no ``start`` part
    or no process whose parts hold :data:`GEMV` one after the other."""
    path = Path(path)
    if path.is_dir():
        path = path / PARTS_FILE
    if not path.is_file():
        raise UserError(f"--process-parts {path}: no such file (the train-validate probe's "
                        f"PROBE_PARTS lines as CSV, `sim host-profile` writes it)")
    def read(row):
        return (row["variant"], row["run"]), row["part"], float(row["rss_kib"]), \
            float(row["exe_text_kib"])

    starts, order, host = [], {}, ""
    for line, row, (process, part, rss, resident) in probe_csv_rows(
            path, ",".join(_COLUMNS[:5]), read, kind="a parts CSV"):
        if not all(0 <= v <= MAX_KIB for v in (rss, resident)):
            raise UserError(f"{path}:{line}: rss_kib and exe_text_kib must be KiB "
                            f"between 0 and {MAX_KIB:,} (a process's RSS), not "
                            f"{row['rss_kib']!r} and {row['exe_text_kib']!r}")
        host = host or row.get("host") or ""
        if part == START:
            starts.append(rss)
        order.setdefault(process, []).append((part, resident))
    gemvs = [b[1] - a[1] for parts in order.values() for a, b in zip(parts, parts[1:])
               if (a[0], b[0]) == GEMV]
    if not starts or not gemvs:
        raise UserError(f"{path}: no '{START}' part, or no process whose '{GEMV[1]}' part "
                        f"follows '{GEMV[0]}' (the probe run with --steps 1)")
    return {"start_bytes": round(statistics.fmean(starts) * 1024),
            "gemv_bytes": round(statistics.fmean(gemvs) * 1024),
            "starts": starts, "gemvs": gemvs, "host": host, "file": path}
