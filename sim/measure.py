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

Progress lines go to stderr; failures raise :class:`~sim.errors.UserError`
(one line, exit 2 from the CLI).
"""

from __future__ import annotations

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

__all__ = ["PROBES", "PROBES_DIR", "measure", "build", "parse_probe_csv", "binary_path"]

PROBES_DIR = Path(__file__).resolve().parent.parent / "experiments" / "probes"

#: subcommands of burn-probes, in the order `all` runs them
PROBES = ("adleak-rss", "adleak-count", "pit-infer", "p10-ema", "sizeof", "alloc-trace", "params")

#: files the probes write besides DIR/<probe>.csv (raw traces, not measured points)
TRACE_FILES = {"alloc-trace": "alloc-trace-events.csv", "sizeof": "sizeof-alloc.csv"}

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
    for tool in ("rustc", "cargo"):
        exe = shutil.which(tool)
        if exe:
            try:
                info[tool] = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                            timeout=30).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
    return info


def measure(probes=None, quick=False, out=None, echo=_echo) -> dict:
    """Build and run the probes; returns the summary written to ``OUT/measure-info.json``."""
    if out is None:
        raise UserError("--out DIR is required")
    chosen = _select(probes)
    _cargo()
    out_dir = prepare_out(out)
    t0 = time.perf_counter()
    binary = build(echo)
    summary = {"quick": bool(quick), "probes": {}, "machine": _machine(),
               "binary": str(binary)}
    failures = []
    for probe in chosen:
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
