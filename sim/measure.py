"""``sim measure``: build the Rust probes of real burn and run them, writing measured CSVs.

The probes live in ``experiments/probes`` (a Cargo workspace, binary
``burn-probes``, burn 0.22.1 from crates.io on the Flex backend; see its
README). This module

1. checks that ``cargo`` is on ``PATH`` (else one clear error);
2. runs ``cargo build --release`` in the workspace, with the cached target dir
   ``experiments/probes/target`` (or ``$CARGO_TARGET_DIR``): minutes the first
   time, seconds afterwards; cargo's progress goes to stderr;
3. runs each selected probe, ``burn-probes <probe> [--quick] --out DIR/<probe>.csv``
   (the probe writes its CSV atomically, and raw allocation traces to
   ``DIR/alloc-trace-events.csv`` / ``DIR/sizeof-alloc.csv``);
4. checks every CSV against the measured schema (:func:`sim.data.read_measured`
   with the workloads' experiment names) and writes ``DIR/measure-info.json``
   (machine, toolchain, per-probe wall time and row count).

With ``repeat`` N > 1 each probe runs N times (every variant in a fresh process each
time) and :func:`merge_repeats` makes one CSV of the runs: a value all runs agree on
is kept, one that varies (times; anything that depends on the process's random hash
seeds or on the allocator's state) becomes the runs' mean, and its note lists every
run's value. Raw traces are the first run's.

Progress lines go to stderr; failures raise :class:`~sim.errors.UserError`
(one line, exit 2 from the CLI).
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .errors import UserError
from .results import prepare_out

__all__ = ["PROBES", "PROBES_DIR", "measure", "build", "parse_probe_csv", "binary_path",
           "merge_repeats", "measured_quick", "QUICK_NOTE"]

PROBES_DIR = Path(__file__).resolve().parent.parent / "experiments" / "probes"

#: subcommands of burn-probes, in the order `all` runs them
PROBES = ("adleak-rss", "adleak-count", "pit-infer", "p10-ema", "p10-ema-adam", "sizeof",
          "alloc-trace", "params", "train-validate", "op-cost", "backward-cost")

#: files the probes write besides DIR/<probe>.csv (raw traces, not measured points)
TRACE_FILES = {"alloc-trace": "alloc-trace-events.csv", "sizeof": "sizeof-alloc.csv"}

#: what a probe's ``--quick`` run adds to every row's note (burn-probes csv.rs Sink::row)
QUICK_NOTE = "quick mode: loop counts cut ~10x"


def measured_quick(row) -> bool:
    """Whether a measured row comes from a probe's ``--quick`` run (loop counts cut ~10x):
    its ``probe`` column is the probe's command with ``--quick``, or its note carries the
    mark every quick row's note ends with."""
    return (str(row.get("probe") or "").endswith("--quick")
            or QUICK_NOTE in str(row.get("note") or ""))

#: phrases of cargo's output that mean the crates could not be fetched
_REGISTRY_HINTS = ("failed to get", "failed to download", "failed to load source",
                   "failed to fetch", "failed to update", "no matching package",
                   "Couldn't resolve host", "network failure", "spurious network error",
                   "could not resolve", "failed to query replaced source")


def _echo(message: str) -> None:
    print(f"measure: {message}", file=sys.stderr, flush=True)


def target_dir() -> Path:
    """Cargo's target dir for the probes (cached between runs)."""
    env = os.environ.get("CARGO_TARGET_DIR")
    return Path(env) if env else PROBES_DIR / "target"


def binary_path() -> Path:
    return target_dir() / "release" / ("burn-probes.exe" if os.name == "nt" else "burn-probes")


def _cargo() -> str:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise UserError("cargo not found on PATH: `sim measure` builds the Rust probes of real "
                        "burn (experiments/probes); install Rust from https://rustup.rs")
    return cargo


def build(echo=_echo) -> Path:
    """``cargo build --release`` of the probes; returns the binary's path."""
    cargo = _cargo()
    if not (PROBES_DIR / "Cargo.toml").is_file():
        raise UserError(f"{PROBES_DIR}/Cargo.toml: the probes workspace is missing")
    echo(f"building the probes (cargo build --release in {PROBES_DIR}, "
         f"target {target_dir()}; the first build takes a few minutes)")
    t0 = time.perf_counter()
    tail = []
    try:
        proc = subprocess.Popen([cargo, "build", "--release", "--locked"], cwd=PROBES_DIR,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace")
    except OSError as exc:
        raise UserError(f"cannot run cargo ({exc.strerror})") from None
    for line in proc.stderr:
        line = line.rstrip()
        if line:
            print(f"  {line}", file=sys.stderr, flush=True)
            tail.append(line)
            del tail[:-40]
    code = proc.wait()
    if code != 0:
        raise UserError(_build_failure(code, tail))
    binary = binary_path()
    if not binary.is_file():
        raise UserError(f"cargo build succeeded but {binary} is missing")
    echo(f"build done in {time.perf_counter() - t0:.1f} s")
    return binary


def _build_failure(code, tail) -> str:
    text = "\n".join(tail)
    errors = [line.strip() for line in tail if line.lstrip().startswith("error")]
    first = errors[0] if errors else (tail[-1].strip() if tail else "no output")
    if any(hint.lower() in text.lower() for hint in _REGISTRY_HINTS):
        return (f"cargo could not fetch the probes' crates from the registry (crates.io "
                f"unreachable or offline?): {first}")
    return f"cargo build of the probes failed (exit {code}): {first}"


def parse_probe_csv(path, known=True) -> list:
    """Rows of a probe CSV, validated against the measured schema (and workload names)."""
    from .data import read_measured
    checker = None
    if known:
        from .compare import known_checker
        checker = known_checker()
    return read_measured(path, checker)


def _select(probes) -> list:
    chosen = []
    for name in probes or ("all",):
        if name == "all":
            chosen.extend(p for p in PROBES if p not in chosen)
        elif name in PROBES:
            if name not in chosen:
                chosen.append(name)
        else:
            raise UserError(f"--probe {name}: unknown probe (valid: {', '.join(PROBES)}, all)")
    return chosen


def _run_probe(binary, probe, quick, out_dir, echo) -> tuple:
    path = out_dir / f"{probe}.csv"
    cmd = [str(binary), probe, "--out", str(path)] + (["--quick"] if quick else [])
    echo(f"running {probe}{' --quick' if quick else ''}")
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, cwd=PROBES_DIR, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        raise UserError(f"cannot run {binary} ({exc.strerror})") from None
    for line in proc.stderr:
        # the probe echoes every row; pass on its progress lines and failures only
        stripped = line.strip()
        if stripped.startswith("[") or "FAILED" in stripped or "error" in stripped.lower():
            print(f"  {stripped}", file=sys.stderr, flush=True)
    code = proc.wait()
    return path, code, time.perf_counter() - t0


def _machine() -> dict:
    info = {"platform": f"{platform.system().lower()}-{platform.machine()}",
            "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpus"] = os.cpu_count()
    from .host import running_host
    host = running_host()
    if host:
        info["host"] = host     # sim.host's facts: what `sim compare`'s report names
    for tool in ("rustc", "cargo"):
        exe = shutil.which(tool)
        if exe:
            try:
                info[tool] = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                            timeout=30).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
    return info


#: the columns that name one observation in a probe's CSV
_KEY = ("experiment", "variant", "phase", "x", "metric")


def merge_repeats(texts, label="probe") -> str:
    r"""One CSV (text) from the CSV texts of N runs of the same probe.

    Every run must give the same observations (same key columns, in any order). A value
    the runs agree on is kept as run 1 printed it; a value that varies becomes the mean,
    printed with as many decimals as the most precise run, and the row's note gains
    ``mean of N fresh runs (v1, v2, ... unit)``. Rows keep run 1's order and columns.

    >>> a = "experiment,variant,phase,x,x_unit,metric,value,unit,note\ne,v,,1,step,ms,1.0,ms,\n"
    >>> merge_repeats([a, a.replace("1.0,ms", "2.0,ms")]).splitlines()[1]
    'e,v,,1,step,ms,1.5,ms,"mean of 2 fresh runs (1.0, 2.0 ms)"'
    """
    runs = []
    for text in texts:
        reader = csv.DictReader(io.StringIO(text))
        runs.append((reader.fieldnames, list(reader)))
    header, first = runs[0]
    index = [{tuple(r[c] for c in _KEY): r for r in rows} for _, rows in runs]
    for i, table in enumerate(index[1:], 2):
        if set(table) != set(index[0]):
            differ = len(set(table) ^ set(index[0]))
            raise UserError(f"{label}: run {i} gave other observations than run 1 "
                            f"({differ} differ); not merging")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for row in first:
        key = tuple(row[c] for c in _KEY)
        values = [table[key]["value"] for table in index]
        merged = dict(row)
        if len(set(values)) > 1:
            decimals = max(len(v.split(".", 1)[1]) if "." in v else 0 for v in values)
            mean = sum(float(v) for v in values) / len(values)
            merged["value"] = f"{mean:.{decimals}f}"
            note = f"mean of {len(values)} fresh runs ({', '.join(values)} {row['unit']})"
            merged["note"] = f"{row['note']}; {note}" if row["note"] else note
        writer.writerow(merged)
    return out.getvalue()


def _run_repeated(binary, probe, quick, out_dir, repeat, echo) -> tuple:
    """Run ``probe`` ``repeat`` times in scratch directories; merge into ``out_dir``."""
    from .data import atomic_write
    scratch = [out_dir / f".repeat-{probe}-{i}" for i in range(1, repeat + 1)]
    t0 = time.perf_counter()
    code = 0
    try:
        texts = []
        for i, where in enumerate(scratch, 1):
            where.mkdir(exist_ok=True)
            echo(f"{probe}: run {i} of {repeat}")
            path, run_code, _ = _run_probe(binary, probe, quick, where, echo)
            code = code or run_code
            if not path.is_file():
                return out_dir / f"{probe}.csv", run_code or 1, time.perf_counter() - t0
            texts.append(path.read_text(encoding="utf-8"))
        path = out_dir / f"{probe}.csv"
        atomic_write(path, merge_repeats(texts, probe))
        extra = TRACE_FILES.get(probe)
        if extra and (scratch[0] / extra).is_file():
            os.replace(scratch[0] / extra, out_dir / extra)
    finally:
        for where in scratch:
            shutil.rmtree(where, ignore_errors=True)
    return path, code, time.perf_counter() - t0


def measure(probes=None, quick=False, out=None, echo=_echo, repeat=1) -> dict:
    """Build and run the probes (each ``repeat`` times, merged by :func:`merge_repeats`);
    returns the summary written to ``OUT/measure-info.json``."""
    if out is None:
        raise UserError("--out DIR is required")
    chosen = _select(probes)
    _cargo()
    # absolute: the probes run in the probes' workspace (cwd PROBES_DIR), so a relative
    # --out would be that directory's, and the probe could not create its CSV there
    out_dir = prepare_out(out).resolve()
    t0 = time.perf_counter()
    binary = build(echo)
    summary = {"quick": bool(quick), "repeat": int(repeat), "probes": {},
               "machine": _machine(), "binary": str(binary)}
    failures = []
    for probe in chosen:
        if repeat > 1:
            path, code, seconds = _run_repeated(binary, probe, quick, out_dir, repeat, echo)
        else:
            path, code, seconds = _run_probe(binary, probe, quick, out_dir, echo)
        entry = {"file": path.name, "seconds": round(seconds, 2), "exit": code}
        if not path.is_file():
            failures.append(f"{probe} wrote no CSV (exit {code})")
            summary["probes"][probe] = entry
            continue
        rows = parse_probe_csv(path)
        entry["rows"] = len(rows)
        extra = TRACE_FILES.get(probe)
        if extra and (out_dir / extra).is_file():
            entry["trace_file"] = extra
        summary["probes"][probe] = entry
        echo(f"{probe}: {len(rows)} rows -> {path} ({seconds:.1f} s"
             f"{', exit ' + str(code) if code else ''})")
        if code != 0:
            failures.append(f"{probe} exited with {code} (its CSV has the variants that ran)")
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    from .data import atomic_write
    atomic_write(out_dir / "measure-info.json", json.dumps(summary, indent=1) + "\n")
    echo(f"done in {summary['seconds']:.1f} s: {len(chosen)} probe(s) -> {out_dir}")
    if failures:
        raise UserError("; ".join(failures))
    return summary
