"""The measured / predicted data schema, and crash-safe file output.

CSV, one observation per row, columns (any order on input)::

    experiment, variant, phase, x, x_unit, metric, value, unit, note

Predicted rows add ``policy`` and ``profile``. Probe output may add
``platform``, ``burn_version`` and ``probe``. Any other column is an error.

:func:`read_measured` validates a file and raises :class:`DataError` with the
file, the line and what is wrong. :func:`atomic_write` writes every output to a
temporary name in the same directory and renames it, so a killed run leaves
either the previous file or the complete new one (through a symbolic link: its
target; a device such as ``/dev/null`` or a FIFO is written in place).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from pathlib import Path

from ..errors import UserError, shown
from ..units import METRICS

__all__ = ["file_in_the_way", "check_output_file", "COLUMNS", "PREDICTED_COLUMNS", "OPTIONAL_COLUMNS", "DataError", "read_measured",
           "rows_to_csv", "atomic_write", "atomic_write_bytes", "output_target",
           "format_value", "key_of", "TRACE_FILES", "QUICK_NOTE", "measured_quick",
           "probe_csv_rows"]

COLUMNS = ["experiment", "variant", "phase", "x", "x_unit", "metric", "value", "unit", "note"]
PREDICTED_COLUMNS = COLUMNS + ["policy", "profile"]
OPTIONAL_COLUMNS = ["policy", "profile", "platform", "burn_version", "probe"]
REQUIRED = ["experiment", "variant", "x", "x_unit", "metric", "value", "unit"]

#: values past this are treated as corrupt input, not data
MAX_ABS_VALUE = 1e15


class DataError(UserError):
    """A measured CSV is malformed."""


#: files the probes write besides DIR/<probe>.csv (raw traces, not measured points)
TRACE_FILES = {"alloc-trace": "alloc-trace-events.csv", "sizeof": "sizeof-alloc.csv",
               "adapter": "gpu-adapter.csv"}

#: what a probe's ``--quick`` run adds to every row's note (burn-probes csv.rs Sink::row)
QUICK_NOTE = "quick mode: loop counts cut ~10x"


def measured_quick(row) -> bool:
    """Whether a measured row comes from a probe's ``--quick`` run (loop counts cut ~10x):
    its ``probe`` column is the probe's command with ``--quick``, or its note carries the
    mark every quick row's note ends with."""
    return (str(row.get("probe") or "").endswith("--quick")
            or QUICK_NOTE in str(row.get("note") or ""))


def format_value(value) -> str:
    """Deterministic text of a number (integers stay integers)."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


#: a phase ``A-minus-B``: the row is the difference of the rows at phases ``A`` and ``B``
#: (a mechanism against its twin, mechanism-cost), which is below 0 where the twin costs
#: more (a fix that removes the mechanism's cost: drop-release leaves the sweep no dead
#: node to free)
DIFFERENCE = re.compile(r"^(.+)-minus-(.+)$")


def is_difference(row) -> bool:
    """Whether ``row`` is the difference of two measured times (phase ``A-minus-B``)."""
    return bool(DIFFERENCE.match(row.get("phase", "") or ""))


def key_of(row) -> tuple:
    """Identity of an observation: (experiment, variant, phase, x, metric)."""
    return (row["experiment"], row["variant"], row.get("phase", "") or "",
            float(row["x"]), row["metric"])


def rows_to_csv(rows, columns=PREDICTED_COLUMNS, cell=format_value) -> str:
    """Rows (dicts) as CSV text with the given columns; ``cell`` formats each value
    (deterministically: the same rows give the same bytes)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row.get(c, "")) for c in columns])
    return out.getvalue()


def probe_csv_rows(path, columns, read, name=None, kind="CSV") -> list:
    """``[(line, row, value), ...]``: every row of the probe's CSV file ``path`` (a dict of
    its columns; a row repeating the header, as a run appended to the file leaves, is
    skipped) with the ``value`` ``read(row)`` makes of it, and its line in the file. The
    one reader of the probes' CSVs (``sim calibrate --heap-refault``, ``--tlb``,
    ``--process-parts``): each bad file is one error line naming the file, as ``name``
    (default: the path; ``--heap-refault FILE`` where an option names it) says it:

    - a file that cannot be read, or not as UTF-8 CSV: ``NAME: cannot read it as KIND``;
    - a row ``read`` cannot take (a column missing, a value not a number: KeyError,
      TypeError, ValueError): ``NAME:LINE: expected columns COLUMNS (...)``.

    A :class:`~sim.errors.UserError` ``read`` raises (a value out of its range) passes as it is.
    """
    name = path if name is None else name
    out = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            first = (reader.fieldnames or [None])[0]
            for row in reader:
                if first is not None and row.get(first) == first:
                    continue
                try:
                    value = read(row)
                except (KeyError, TypeError, ValueError):
                    raise UserError(f"{name}:{reader.line_num}: expected columns {columns} "
                                    f"(one is missing, or not a number)") from None
                out.append((reader.line_num, row, value))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{name}: cannot read it as {kind} ({e})") from None
    return out


def atomic_write(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def output_target(path):
    """Where writing ``path`` puts the data, and how: ``(target, in_place)``. A symbolic
    link is followed (its target is written, the link stays); ``in_place`` is True for an
    existing file that is not a regular file (``/dev/null``, a FIFO, a terminal), which
    is written as it is: renaming over it would replace the device with a file."""
    target = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    return target, target.exists() and not target.is_file() and not target.is_dir()


def file_in_the_way(path):
    """The nearest existing ancestor of ``path`` if it is not a directory (a file where a
    directory would have to be: nothing can be written below it), else None."""
    above = next((p for p in Path(path).parents if p.exists()), None)
    return above if above is not None and not above.is_dir() else None


def check_output_file(out, option="--out") -> None:
    """One error line, before any work, for an output file ``out`` that cannot be
    written (``option``: how the command names it). Checked where :func:`atomic_write`
    puts the data (:func:`output_target`): not a directory; a device or FIFO writable in
    place; else an existing directory to hold it (not one below a file,
    :func:`file_in_the_way`), writable, that takes a new file: a temporary file is
    created there and removed, as the write will (``/proc`` passes the permission check
    and takes none)."""
    path, in_place = output_target(out)
    if path.is_dir():
        raise UserError(f"{option} {out}: is a directory")
    if in_place:
        if not os.access(path, os.W_OK):
            raise UserError(f"{option} {out}: not writable")
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        above = file_in_the_way(path)
        if above is not None:
            raise UserError(f"{option} {out}: {above} is a file, not a directory")
        raise UserError(f"{option} {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{option} {out}: directory {parent} is not writable")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise UserError(f"{option} {out}: cannot create a file in {parent} "
                        f"({exc.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` (:func:`output_target`): a regular file, new or
    existing, is written to a temporary file beside it and renamed over it; a device or
    FIFO is written in place."""
    path, in_place = output_target(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a file")
    if in_place:
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise UserError(f"{path}: cannot write ({exc.strerror})") from None
        return
    if not directory.exists():
        raise UserError(f"{directory}: no such directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise UserError(f"{directory}: cannot write here ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_measured(path, known=None) -> list:
    """Read and validate a measured CSV; returns rows with numeric ``x`` and ``value``.

    Parameters
    ----------
    path : str or Path
    known : callable, optional
        ``known(experiment, variant, phase, x_unit) -> str or None``: an error text
        for rows naming a workload or variant the simulator does not know, or an
        ``x_unit`` the workload does not sample that experiment in.

    Raises
    ------
    DataError
        One line: file, line number, what is wrong.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text") from None
    if not text.strip():
        raise DataError(f"{path}: empty file (expected a header: {','.join(COLUMNS)})")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    if len(header) == 1 and (";" in header[0] or "\t" in header[0]):
        raise DataError(f"{path}:1: wrong delimiter (columns must be separated by commas)")
    unknown = [h for h in header if h not in COLUMNS and h not in OPTIONAL_COLUMNS]
    if unknown:
        raise DataError(f"{path}:1: unknown column(s) {', '.join(unknown)} "
                        f"(allowed: {', '.join(COLUMNS + OPTIONAL_COLUMNS)})")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise DataError(f"{path}:1: duplicate column(s) {', '.join(dupes)}")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise DataError(f"{path}:1: missing column(s) {', '.join(missing)}")
    rows = []
    seen = {}
    for lineno, fields in enumerate(reader, start=2):
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise DataError(f"{path}:{lineno}: {len(fields)} fields, the header has {len(header)}")
        row = {h: f.strip() for h, f in zip(header, fields)}
        row.setdefault("phase", "")
        row.setdefault("note", "")
        for column in ("x", "value"):
            try:
                number = float(row[column])
            except ValueError:
                raise DataError(f"{path}:{lineno}: {column} '{row[column]}' is not a number") from None
            if not math.isfinite(number) or abs(number) > MAX_ABS_VALUE:
                raise DataError(f"{path}:{lineno}: {column} {row[column]} is out of range")
            row[column] = number
        metric = METRICS.get(row["metric"])
        if metric is None and row["metric"] not in ("rss_bytes",):
            raise DataError(f"{path}:{lineno}: unknown metric '{row['metric']}' "
                            f"(known: {', '.join(sorted(METRICS))})")
        expected_unit = metric.unit if metric is not None else "B"
        if row["unit"] != expected_unit:
            raise DataError(f"{path}:{lineno}: unit '{row['unit']}' is wrong for metric "
                            f"{row['metric']} (expected {expected_unit})")
        if (metric is not None and metric.kind == "time" and row["value"] < 0
                and not is_difference(row)):
            raise DataError(f"{path}:{lineno}: {row['metric']} {shown(row['value'])} is "
                            f"negative: a time is never below 0")
        if (metric is not None and not metric.signed and row["value"] < 0
                and not is_difference(row)):
            raise DataError(f"{path}:{lineno}: {row['metric']} {shown(row['value'])} is "
                            f"negative: a {metric.kind} figure in {metric.unit} that is not a "
                            f"change is never below 0")
        if known is not None:
            problem = known(row["experiment"], row["variant"], row["phase"], row["x_unit"])
            if problem:
                raise DataError(f"{path}:{lineno}: {problem}")
        key = key_of(row) + (row.get("policy", ""), row.get("platform", ""))
        if key in seen:
            raise DataError(f"{path}:{lineno}: duplicate observation (same experiment, variant, "
                            f"phase, x, metric as line {seen[key]})")
        seen[key] = lineno
        row["_file"] = str(path)
        row["_line"] = lineno
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no data rows")
    return rows


def dump_json(rows) -> str:
    return json.dumps(rows, indent=1, sort_keys=True, default=str) + "\n"
