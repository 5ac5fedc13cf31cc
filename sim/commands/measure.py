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
4. checks every CSV against the measured schema (:func:`sim.analysis.data.read_measured`
   with the workloads' experiment names) and writes ``DIR/measure-info.json``
   (machine, toolchain, per-probe wall time and row count).

With ``repeat`` N > 1 each probe runs N times (every variant in a fresh process each
time) and :func:`merge_repeats` makes one CSV of the runs: a value all runs agree on
is kept, one that varies (times; anything that depends on the process's random hash
seeds or on the allocator's state) becomes the runs' mean, and its note lists every
run's value. Raw traces are the first run's.

With ``gpu`` the GPU probes run instead (``experiments/probes/gpu-probes``, its own
Cargo workspace: burn 0.22.1 with ``std, wgpu, autodiff``), each in a fresh process
(a wgpu runtime is initialised once per process), on the Vulkan device Mesa's lavapipe
provides; their CSVs are ``DIR/gpu-<probe>.csv``. Without a Vulkan loader or driver
the run stops before building, naming the packages to install.

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
import re
import sys
import time
from pathlib import Path

from ..analysis.compare import known_checker
from ..analysis.data import TRACE_FILES, atomic_write, read_measured
from ..errors import UserError
from ..platform.host import running_host
from .patches import apply_all, copy_crate, patch_label, registry_crate, resolve
from ..output.results import prepare_out
from ..paths import EXPERIMENTS

__all__ = ["PROBES", "PROBES_DIR", "GPU_PROBES", "GPU_DIR", "vulkan_missing", "measure", "build", "parse_probe_csv", "binary_path",
           "merge_repeats"]

PROBES_DIR = EXPERIMENTS / "probes"

#: subcommands of burn-probes, in the order `all` runs them
PROBES = ("adleak-rss", "adleak-count", "pit-infer", "p10-ema", "p10-ema-adam", "sizeof",
          "alloc-trace", "params", "train-validate", "op-cost", "backward-cost",
          "mechanism-cost")

#: subcommands of gpu-probes (experiments/probes/gpu-probes), one process each
GPU_PROBES = ("pit-infer", "adleak", "train-step", "large-forward", "cleanup")
GPU_DIR = PROBES_DIR / "gpu-probes"
#: what the GPU probes need from the system (Debian/Ubuntu package names)
VULKAN_PACKAGES = ("libvulkan1", "mesa-vulkan-drivers")
#: gpu-probes' exit code when wgpu finds no adapter
NO_DEVICE_EXIT = 3

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


def binary_path(gpu=False) -> Path:
    name = "gpu-probes" if gpu else "burn-probes"
    root = GPU_DIR / "target" if gpu else target_dir()
    return root / "release" / (name + ".exe" if os.name == "nt" else name)


def vulkan_missing(icd_dirs=("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")) -> list:
    """The packages of :data:`VULKAN_PACKAGES` whose files are absent: the Vulkan loader
    (``libvulkan.so.1``) and an installable client driver (a JSON manifest in the ICD
    directories; mesa-vulkan-drivers installs lavapipe's)."""
    import ctypes.util
    missing = []
    if ctypes.util.find_library("vulkan") is None:
        missing.append("libvulkan1")
    if not any(Path(d).is_dir() and any(Path(d).glob("*.json")) for d in icd_dirs):
        missing.append("mesa-vulkan-drivers")
    return missing


def _no_vulkan(missing) -> UserError:
    names = " ".join(missing or VULKAN_PACKAGES)
    return UserError(f"no Vulkan device for the GPU probes: install {names} "
                     f"(apt-get install {names})")


def _cargo() -> str:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise UserError("cargo not found on PATH: `sim measure` builds the Rust probes of real "
                        "burn (experiments/probes); install Rust from https://rustup.rs")
    return cargo


def build(echo=_echo, gpu=False) -> Path:
    """``cargo build --release`` of the probes (``gpu``: of gpu-probes, whose cold build
    takes ~20 min on 2 cores); returns the binary's path."""
    cargo = _cargo()
    where = GPU_DIR if gpu else PROBES_DIR
    if not (where / "Cargo.toml").is_file():
        raise UserError(f"{where}/Cargo.toml: the probes workspace is missing")
    echo(f"building the probes (cargo build --release in {where}, "
         f"target {binary_path(gpu).parent.parent}; the first build takes "
         f"{'~20' if gpu else 'a few'} minutes)")
    t0 = time.perf_counter()
    _cargo_build([cargo, "build", "--release", "--locked"], where)
    binary = binary_path(gpu)
    if not binary.is_file():
        raise UserError(f"cargo build succeeded but {binary} is missing")
    echo(f"build done in {time.perf_counter() - t0:.1f} s")
    return binary


def _cargo_build(command, cwd, env=None, what="the probes", keep=None) -> None:
    """Run a cargo build, its messages echoed on stderr; a failure is one error line (its
    first ``error`` line, or what the registry said) naming ``what`` was built. ``keep``: a
    list that receives every line cargo wrote."""
    tail = []
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        raise UserError(f"cannot run cargo ({exc.strerror})") from None
    for line in proc.stderr:
        line = line.rstrip()
        if line:
            print(f"  {line}", file=sys.stderr, flush=True)
            tail.append(line)
            del tail[:-40]
            if keep is not None:
                keep.append(line)
    code = proc.wait()
    if code != 0:
        raise UserError(_build_failure(code, tail).replace("the probes", what))


def _build_failure(code, tail) -> str:
    text = "\n".join(tail)
    errors = [line.strip() for line in tail if line.lstrip().startswith("error")]
    first = errors[0] if errors else (tail[-1].strip() if tail else "no output")
    if any(hint.lower() in text.lower() for hint in _REGISTRY_HINTS):
        return (f"cargo could not fetch the probes' crates from the registry (crates.io "
                f"unreachable or offline?): {first}")
    return f"cargo build of the probes failed (exit {code}): {first}"


#: where ``--patch`` builds: patched crate copies, per-patch workspaces, one shared target
#: dir (the dependencies build once; per patch only burn-autodiff and its dependents) and
#: each patch's binary
PATCHED_DIR = PROBES_DIR / "target-patched"


def _workspace_toml(crate_dir) -> str:
    """The probes' Cargo.toml with burn-autodiff replaced by the patched copy."""
    text = (PROBES_DIR / "Cargo.toml").read_text(encoding="utf-8")
    path = str(crate_dir).replace("\\", "/")
    return (text.rstrip("\n") + "\n\n# sim measure --patch: burn-autodiff from a patched copy\n"
            f"[patch.crates-io]\nburn-autodiff = {{ path = \"{path}\" }}\n")


def prepare_patched(patches, root=None, crate=None) -> tuple:
    """Copy burn-autodiff 0.22.1 from cargo's registry, apply ``patches`` (a ``--patch``
    value) and write a workspace that builds the probes against it; returns ``(label,
    workspace dir)``. A patch that does not apply is a :class:`UserError` naming the hunk,
    raised before anything in the build dir changes."""
    paths = resolve(patches)
    label = patch_label(paths)
    root = Path(root) if root is not None else PATCHED_DIR
    source = Path(crate) if crate is not None else registry_crate()
    if source is None:
        raise UserError("burn-autodiff 0.22.1 is not in cargo's registry yet: run `sim measure` "
                        "once (or `cargo fetch` in experiments/probes)")
    slug = label.split("+", 1)[1]
    staging = root / "src" / f".{slug}.tmp"
    copy_crate(source, staging)
    try:
        apply_all(staging, paths)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    crate_dir = root / "src" / slug / source.name
    if crate_dir.is_dir() and _same_tree(staging, crate_dir):
        # the copy cargo built last time is kept as it is: a fresh copy's new mtimes would
        # rebuild burn-autodiff and every crate above it (minutes) for nothing
        shutil.rmtree(staging)
    else:
        if crate_dir.parent.exists():
            shutil.rmtree(crate_dir.parent)
        crate_dir.parent.mkdir(parents=True)
        os.replace(staging, crate_dir)
    ws = root / "ws" / slug
    ws.mkdir(parents=True, exist_ok=True)
    for member in ("burn-probes", "cache-bw"):
        link = ws / member
        if not link.exists():
            link.symlink_to(PROBES_DIR / member, target_is_directory=True)
    (ws / "Cargo.toml").write_text(_workspace_toml(crate_dir.resolve()), encoding="utf-8")
    shutil.copyfile(PROBES_DIR / "Cargo.lock", ws / "Cargo.lock")
    return label, ws


def _same_tree(a, b) -> bool:
    """Whether directories ``a`` and ``b`` hold the same files with the same bytes."""
    a, b = Path(a), Path(b)
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if files_a != files_b:
        return False
    return all((a / rel).read_bytes() == (b / rel).read_bytes() for rel in files_a)


def build_patched(patches, echo=_echo) -> tuple:
    """Build the probes against patched burn-autodiff; returns ``(label, binary)``."""
    cargo = _cargo()
    if registry_crate() is None:
        echo("burn-autodiff 0.22.1 not in cargo's registry: cargo fetch")
        subprocess.run([cargo, "fetch", "--locked"], cwd=PROBES_DIR, check=False)
    label, ws = prepare_patched(patches)
    env_target = os.environ.get("CARGO_TARGET_DIR")
    target = Path(env_target) if env_target else PATCHED_DIR / "target"
    echo(f"building the probes against burn-autodiff {label} (workspace {ws}, target "
         f"{target}; only burn-autodiff and its dependents rebuild once the first build "
         f"is done)")
    t0 = time.perf_counter()
    # the patches' names, for the sizeof probe's stand-ins (burn-probes/build.rs)
    env = dict(os.environ, CARGO_TARGET_DIR=str(target),
               BURN_PROBES_PATCH=label.split("+", 1)[1])
    _cargo_build([cargo, "build", "--release", "-p", "burn-probes"], ws, env,
                 f"the probes ({label})")
    built = target / "release" / ("burn-probes.exe" if os.name == "nt" else "burn-probes")
    binary = PATCHED_DIR / "bin" / f"burn-probes-{label}"
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, binary)
    echo(f"build done in {time.perf_counter() - t0:.1f} s -> {binary}")
    return label, binary


#: the burn the probes are written against (experiments/probes/Cargo.toml pins it)
PROBES_BURN = "0.22.1"

_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?")


def prepare_release(version, root=None) -> Path:
    """A workspace (``ROOT/ws/burn-VERSION``) that builds the probes against burn
    ``version`` from crates.io (burn and burn-autodiff pinned to it) instead of 0.22.1;
    cargo resolves the rest (no lock file: the probes' Cargo.lock pins 0.22.1's crates)."""
    if not _VERSION.fullmatch(str(version)):
        raise UserError(f"--burn {version!r}: not a version (e.g. 0.23.0-pre.1)")
    root = Path(root) if root is not None else PATCHED_DIR
    text = (PROBES_DIR / "Cargo.toml").read_text(encoding="utf-8")
    pin = f'version = "={PROBES_BURN}"'
    if text.count(pin) != 2:
        raise UserError(f"{PROBES_DIR / 'Cargo.toml'}: expected burn and burn-autodiff pinned "
                        f"as {pin}")
    ws = root / "ws" / f"burn-{version}"
    ws.mkdir(parents=True, exist_ok=True)
    for member in ("burn-probes", "cache-bw"):
        link = ws / member
        if not link.exists():
            link.symlink_to(PROBES_DIR / member, target_is_directory=True)
    toml = text.replace(pin, f'version = "={version}"')
    toml += f"\n# sim measure --burn {version}: the probes against that release\n"
    (ws / "Cargo.toml").write_text(toml, encoding="utf-8")
    return ws


#: burn-autodiff's files the simulator mirrors (sim/burn/runtime)
RUNTIME_FILES = ("src/runtime/graph.rs", "src/runtime/memory_management.rs",
                 "src/runtime/server.rs")


def runtime_equal(version) -> dict:
    """``file -> True/False`` for each of :data:`RUNTIME_FILES`: whether burn-autodiff
    ``version``'s copy in cargo's registry is byte for byte burn-autodiff 0.22.1's (the
    mirror's); empty where either crate is not in the registry."""
    theirs, ours = registry_crate("burn-autodiff", version), registry_crate("burn-autodiff",
                                                                           PROBES_BURN)
    if theirs is None or ours is None:
        return {}
    return {name: (theirs / name).is_file() and (ours / name).is_file()
            and (theirs / name).read_bytes() == (ours / name).read_bytes()
            for name in RUNTIME_FILES}


def api_differences(tail) -> list:
    """``file:line: message`` of each compile error in cargo's output ``tail`` that is in
    the probes' own source: where burn's API differs from 0.22.1's as the probes use it."""
    found, message = [], None
    for line in tail:
        text = line.strip()
        if text.startswith("error"):
            message = text
        elif text.startswith("-->") and message is not None:
            where = text[3:].strip()
            if "burn-probes/" in where or where.startswith("src/"):
                found.append(f"{where.split('burn-probes/')[-1]}: {message}")
            message = None
    return list(dict.fromkeys(found))


def build_release(version, echo=_echo) -> Path:
    """Build the probes against burn ``version`` (:func:`prepare_release`); returns the
    binary. A build that fails on the probes' source is one error listing where burn's
    API differs (:func:`api_differences`)."""
    cargo = _cargo()
    ws = prepare_release(version)
    target = PATCHED_DIR / "target-release"
    echo(f"building the probes against burn {version} (workspace {ws}, target {target}; "
         f"every burn crate builds once: minutes)")
    t0 = time.perf_counter()
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    tail = []
    try:
        _cargo_build([cargo, "build", "--release", "-p", "burn-probes"], ws, env,
                     f"the probes (burn {version})", keep=tail)
    except UserError as exc:
        missing = [line.strip() for line in tail if "does not have that feature" in line]
        if missing:
            raise UserError(f"the probes do not build against burn {version}: "
                            f"{missing[0]}") from None
        differ = api_differences(tail)
        if differ:
            raise UserError(f"the probes do not build against burn {version}: its API differs "
                            f"from {PROBES_BURN}'s at " + "; ".join(differ[:8])
                            + (f" (and {len(differ) - 8} more)" if len(differ) > 8 else ""))
        raise exc
    built = target / "release" / ("burn-probes.exe" if os.name == "nt" else "burn-probes")
    binary = PATCHED_DIR / "bin" / f"burn-probes-{version}"
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, binary)
    echo(f"build done in {time.perf_counter() - t0:.1f} s -> {binary}")
    return binary


def retag(path, burn_version) -> None:
    """Set every row's ``burn_version`` in the probe CSV ``path`` (atomically)."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames
        rows = list(reader)
    if not header or "burn_version" not in header:
        return
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        row["burn_version"] = burn_version
        writer.writerow(row)
    atomic_write(path, out.getvalue())


def parse_probe_csv(path, known=True) -> list:
    """Rows of a probe CSV, validated against the measured schema (and workload names)."""
    checker = None
    if known:
        checker = known_checker()
    return read_measured(path, checker)


def _select(probes, known=PROBES) -> list:
    chosen = []
    for name in probes or ("all",):
        if name == "all":
            chosen.extend(p for p in known if p not in chosen)
        elif name in known:
            if name not in chosen:
                chosen.append(name)
        else:
            raise UserError(f"--probe {name}: unknown probe (valid: {', '.join(known)}, all)")
    return chosen


def _csv_name(probe, gpu=False) -> str:
    return f"gpu-{probe}.csv" if gpu else f"{probe}.csv"


def _run_probe(binary, probe, quick, out_dir, echo, gpu=False) -> tuple:
    path = out_dir / _csv_name(probe, gpu)
    cmd = [str(binary), probe, "--out", str(path)] + (["--quick"] if quick else [])
    echo(f"running {'gpu-probes ' if gpu else ''}{probe}{' --quick' if quick else ''}")
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, cwd=GPU_DIR if gpu else PROBES_DIR,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace")
    except OSError as exc:
        raise UserError(f"cannot run {binary} ({exc.strerror})") from None
    for line in proc.stderr:
        # the probe echoes every row; pass on its progress lines and failures only
        stripped = line.strip()
        if "XDG_RUNTIME_DIR" in stripped:
            continue    # the Vulkan loader's window-system probe, harmless without a display
        if stripped.startswith("[") or "FAILED" in stripped or "error" in stripped.lower() \
                or stripped.startswith("gpu-probes:"):
            print(f"  {stripped}", file=sys.stderr, flush=True)
    code = proc.wait()
    if gpu and code == NO_DEVICE_EXIT:
        raise _no_vulkan(vulkan_missing())
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
    host = running_host()
    if host:
        info["host"] = host     # sim.platform.host's facts: what `sim compare`'s report names
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


def _adapter_name(path) -> str:
    rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    note = rows[0]["note"] if rows else ""
    return note.split("adapter: ", 1)[-1]


def _run_repeated(binary, probe, quick, out_dir, repeat, echo, gpu=False) -> tuple:
    """Run ``probe`` ``repeat`` times in scratch directories; merge into ``out_dir``."""
    scratch = [out_dir / f".repeat-{probe}-{i}" for i in range(1, repeat + 1)]
    t0 = time.perf_counter()
    code = 0
    try:
        texts = []
        for i, where in enumerate(scratch, 1):
            where.mkdir(exist_ok=True)
            echo(f"{probe}: run {i} of {repeat}")
            path, run_code, _ = _run_probe(binary, probe, quick, where, echo, gpu)
            code = code or run_code
            if not path.is_file():
                return out_dir / _csv_name(probe, gpu), run_code or 1, time.perf_counter() - t0
            texts.append(path.read_text(encoding="utf-8"))
        path = out_dir / _csv_name(probe, gpu)
        atomic_write(path, merge_repeats(texts, probe))
        extra = TRACE_FILES.get(probe)
        if extra and (scratch[0] / extra).is_file():
            os.replace(scratch[0] / extra, out_dir / extra)
    finally:
        for where in scratch:
            shutil.rmtree(where, ignore_errors=True)
    return path, code, time.perf_counter() - t0


def measure(probes=None, quick=False, out=None, echo=_echo, repeat=1, patch=None,
            gpu=False, burn=None, cpu_time=False) -> dict:
    """Build and run the probes (each ``repeat`` times, merged by :func:`merge_repeats`);
    returns the summary written to ``OUT/measure-info.json``. ``patch``: a ``--patch``
    value (``NAME``, ``FILE.patch``, ``a+b``): the probes are built against burn-autodiff
    0.22.1 with those patches and every row's ``burn_version`` reads ``0.22.1+NAME``.
    ``gpu``: the GPU probes instead. ``burn``: a release of burn from crates.io to build
    the probes against instead of 0.22.1 (rows tagged with it). ``cpu_time``: the probes
    time with the thread's CPU clock (``PROBE_CPU_TIME``, burn-probes src/clock.rs), which
    leaves out the time a probe waited for a CPU another job held."""
    if out is None:
        raise UserError("--out DIR is required")
    if gpu and quick:
        raise UserError("--quick does not apply to --gpu (the GPU probes are short)")
    if gpu and patch:
        raise UserError("--patch does not apply to --gpu (the GPU probes build burn's "
                        "released crates)")
    if burn and (patch or gpu):
        raise UserError("--burn takes neither --patch (the patches are written against "
                        "burn-autodiff 0.22.1) nor --gpu")
    chosen = _select(probes, GPU_PROBES if gpu else PROBES)
    label = None
    if patch:
        label = patch_label(resolve(patch))   # an unknown patch: an error before any work
    _cargo()
    if gpu:
        missing = vulkan_missing()
        if missing:
            raise _no_vulkan(missing)
    # absolute: the probes run in experiments/probes, where a relative --out would land
    out_dir = prepare_out(out).resolve()
    t0 = time.perf_counter()
    if patch:
        label, binary = build_patched(patch, echo)
    elif burn:
        label, binary = str(burn), build_release(burn, echo)
    else:
        binary = build(echo, gpu)
    cold = evict_page_cache(binary)
    summary = {"quick": bool(quick), "repeat": int(repeat), "probes": {},
               "machine": _machine(), "binary": str(binary), "binary_evicted": cold,
               "clock": "thread CPU time (PROBE_CPU_TIME)" if cpu_time else "wall time"}
    if label:
        summary["burn_version"] = label
    if burn:
        # the mirrored files against 0.22.1's: where equal, burn-0.22.1's model applies
        summary["runtime_equal_to_" + PROBES_BURN] = runtime_equal(burn)
    if patch:
        summary["patches"] = [str(p.relative_to(PROBES_DIR.parent.parent))
                              if p.is_relative_to(PROBES_DIR.parent.parent) else str(p)
                              for p in resolve(patch)]
    failures = []
    if gpu:
        # the adapter and the limits cubecl sizes its pool from (not measured points)
        path, code, _ = _run_probe(binary, "adapter", False, out_dir, echo, gpu=True)
        if code != 0 or not path.is_file():
            raise UserError(f"gpu-probes adapter failed (exit {code})")
        summary["adapter"] = {row["metric"]: row["value"] for row in
                              csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))}
        summary["adapter"]["name"] = _adapter_name(path)
    previous = os.environ.get("PROBE_CPU_TIME")
    if cpu_time:
        os.environ["PROBE_CPU_TIME"] = "1"
    else:
        os.environ.pop("PROBE_CPU_TIME", None)
    try:
        _run_all(chosen, binary, quick, out_dir, repeat, echo, gpu, label, summary, failures)
    finally:
        if previous is None:
            os.environ.pop("PROBE_CPU_TIME", None)
        else:
            os.environ["PROBE_CPU_TIME"] = previous
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    atomic_write(out_dir / "measure-info.json", json.dumps(summary, indent=1) + "\n")
    echo(f"done in {summary['seconds']:.1f} s: {len(chosen)} probe(s) -> {out_dir}")
    if failures:
        raise UserError("; ".join(failures))
    return summary


def evict_page_cache(binary) -> bool:
    """Drop ``binary``'s pages from the kernel's page cache before its first run; returns
    whether that could be done (``posix_fadvise``, Linux).

    Resident text depends on it. A text page fault maps, besides the faulting page, every
    page of its 64-KiB window that is already cached (the kernel's fault-around), so a
    binary cargo (or the copy of a patched build) has just written, all of whose pages
    are cached, starts 0.5-0.7 MB more resident than the same binary read in by its own
    runs (adleak-rss flex at 0 iterations on this host: 4.41-4.55 MB for a fresh copy of
    the unpatched probes, 3.81-4.08 after eviction, the unpatched binary 3.96-4.01). The
    runs after an eviction read their text in as the runs of an old binary do, so a
    patched and an unpatched build are measured alike."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return False
    try:
        fd = os.open(binary, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.fsync(fd)    # written pages must be clean before the kernel drops them
        fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _run_all(chosen, binary, quick, out_dir, repeat, echo, gpu, label, summary, failures):
    """Run each probe of ``chosen`` (``repeat`` times), its entry into ``summary``."""
    for probe in chosen:
        if repeat > 1:
            path, code, seconds = _run_repeated(binary, probe, quick, out_dir, repeat, echo,
                                                gpu)
        else:
            path, code, seconds = _run_probe(binary, probe, quick, out_dir, echo, gpu)
        entry = {"file": path.name, "seconds": round(seconds, 2), "exit": code}
        if not path.is_file():
            failures.append(f"{probe} wrote no CSV (exit {code})")
            summary["probes"][probe] = entry
            continue
        if label:
            retag(path, label)
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
