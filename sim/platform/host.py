"""The host a profile describes, and the host ``sim`` runs on.

A Linux profile made by ``sim host-profile`` (or written by hand for the machine the probes
ran on) carries a ``[host]`` table: the facts of the machine that set parameters of the
model, each read from the system:

* ``cpu_model``: ``model name`` of ``/proc/cpuinfo`` (what ``lscpu`` prints);
* ``cores``: the CPUs the kernel reports (``os.cpu_count()``);
* ``page_bytes``: ``sysconf(_SC_PAGESIZE)``;
* ``glibc``: ``confstr(_CS_GNU_LIBC_VERSION)`` (the C library whose malloc the
  ``glibc-arena`` allocator models);
* ``l1d_bytes``/``l1d_ways``, ``l2_bytes``/``l2_ways``, ``l3_bytes``/``l3_ways`` and
  ``line_bytes``: ``/sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size,
  ways_of_associativity,coherency_line_size}``, the files gemm-common reads at its first
  call (0: no such cache).

The L2 is the one that matters most: gemm allocates an L2-sized buffer at the first matmul
of a thread (``backend.flex.matmul_workspace_bytes``), so heap bytes of every program that
runs a matmul differ by the difference of the two hosts' L2 sizes, and the L2 model
(``process.l2_bytes``) sets elementwise bandwidth and the orphan sweep's miss fraction.
:func:`differences` names what differs between a profile's host and this one;
:func:`mismatch_warning` makes the one warning line ``sim run/sweep/compare`` print.
A profile of another kind of machine than this one (its ``[meta] platform``, e.g. the
default ``macos-aarch64`` on a ``linux-x86_64`` host: :func:`host_kind`) is not compared
fact by fact: :func:`other_kind_note` makes the line ``sim sweep/compare`` and the report
print instead, naming the machine (:func:`profile_machine`) and ``sim host-profile``.

Everything here reads files under a root given as an argument, so tests run on a fake
``/sys`` and ``/proc`` (no dependence on the machine the suite runs on).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

__all__ = ["HOST_KEYS", "read_host", "parse_cpuinfo", "parse_size", "read_caches",
           "differences", "mismatch_warning", "running_host", "describe", "SOURCES",
           "read_sysfs_shape", "host_kind", "profile_machine", "other_kind_note",
           "how_to_profile"]

CPU_DIR = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")

#: the keys of a profile's ``[host]`` table and their types (sim.engine.profile.RECORDS)
HOST_KEYS = {
    "cpu_model": "str",
    "cores": "int",
    "page_bytes": "int",
    "glibc": "str",
    "l1d_bytes": "int",
    "l1d_ways": "int",
    "l2_bytes": "int",
    "l2_ways": "int",
    "l3_bytes": "int",
    "l3_ways": "int",
    "line_bytes": "int",
}

#: where each ``[host]`` value is read from (the comment ``sim host-profile`` writes)
SOURCES = {
    "cpu_model": "/proc/cpuinfo: model name",
    "cores": "os.cpu_count(): the CPUs the kernel reports",
    "page_bytes": "sysconf(_SC_PAGESIZE)",
    "glibc": "confstr(_CS_GNU_LIBC_VERSION)",
    "l1d_bytes": "cpu0/cache/index*/size of the level-1 Data cache",
    "l1d_ways": "... its ways_of_associativity",
    "l2_bytes": "cpu0/cache/index*/size of the level-2 cache (gemm's first-call buffer)",
    "l2_ways": "... its ways_of_associativity",
    "l3_bytes": "cpu0/cache/index*/size of the level-3 cache (0: none)",
    "l3_ways": "... its ways_of_associativity",
    "line_bytes": "cpu0/cache/index0/coherency_line_size",
}

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*i?B?\s*$", re.IGNORECASE)


def parse_size(text) -> int:
    """Bytes of a sysfs cache size (``32K``, ``1024K``, ``32768K``, ``2M``, ``512``).

    >>> parse_size("1024K"), parse_size("32M"), parse_size("64")
    (1048576, 33554432, 64)
    """
    found = _SIZE.match(str(text))
    if not found:
        raise ValueError(f"not a cache size: {text!r}")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[found.group(2).upper()]
    return int(found.group(1)) * scale


def parse_cpuinfo(text) -> dict:
    """``model name``, ``cpu family`` and ``model`` of the first processor in
    ``/proc/cpuinfo`` text (missing keys are absent; aarch64 has no model name).

    >>> parse_cpuinfo("processor\\t: 0\\nmodel name\\t: AMD EPYC\\ncpu family\\t: 25\\n")
    {'model name': 'AMD EPYC', 'cpu family': '25'}
    """
    out = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break           # the first processor's block only
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in ("model name", "cpu family", "model") and key not in out:
            out[key] = value.strip()
    return out


def read_caches(cache_dir) -> list:
    """Every ``indexN`` of ``cache_dir`` (``/sys/devices/system/cpu/cpu0/cache``) as a dict
    ``{index, level, type, size, ways, line}``, sorted by level then index; an index whose
    files cannot be read or parsed is left out."""
    caches = []
    try:
        names = sorted(p.name for p in Path(cache_dir).iterdir() if p.name.startswith("index"))
    except OSError:
        return []
    for name in names:
        d = Path(cache_dir) / name
        try:
            entry = {"index": name,
                     "level": int(_read(d / "level")),
                     "type": _read(d / "type"),
                     "size": parse_size(_read(d / "size")),
                     "ways": int(_read(d / "ways_of_associativity") or 0),
                     "line": int(_read(d / "coherency_line_size") or 0)}
        except (OSError, ValueError):
            continue
        caches.append(entry)
    return sorted(caches, key=lambda c: (c["level"], c["index"]))


def _read(path) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace").strip()


def _cache(caches, level, types=("Data", "Unified")):
    for c in caches:
        if c["level"] == level and c["type"] in types:
            return c
    return None


def _glibc() -> str:
    """The C library's version (``2.36``), or "" where it is not glibc."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        text = ""
    found = re.search(r"glibc\s+(\S+)", text)
    if found:
        return found.group(1)
    lib, version = platform.libc_ver()
    return version if lib == "glibc" else ""


def read_host(cpu_dir=CPU_DIR, cpuinfo=CPUINFO, page_bytes=None, glibc=None,
              cores=None) -> dict:
    """The ``[host]`` facts of this machine (:data:`HOST_KEYS`), read from ``cpu_dir``
    (``/sys/devices/system/cpu``) and ``cpuinfo``; ``page_bytes``, ``glibc`` and
    ``cores`` default to the running process's (sysconf, confstr, cpu_count).

    Raises :class:`OSError`/``ValueError`` only for what cannot be worked around: no
    level-2 cache listed (the value gemm's buffer and the L2 model need)."""
    try:
        info = parse_cpuinfo(Path(cpuinfo).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        info = {}
    caches = read_caches(Path(cpu_dir) / "cpu0" / "cache")
    l1d, l2, l3 = _cache(caches, 1, ("Data",)), _cache(caches, 2), _cache(caches, 3)
    if l2 is None:
        raise ValueError(f"{Path(cpu_dir) / 'cpu0' / 'cache'}: no level-2 cache listed "
                         f"(index*/level, type, size)")
    line = (l1d or l2)["line"]
    if page_bytes is None:
        page_bytes = os.sysconf("SC_PAGE_SIZE")
    return {
        "cpu_model": info.get("model name") or platform.processor() or platform.machine(),
        "cores": int(cores if cores is not None else (os.cpu_count() or 1)),
        "page_bytes": int(page_bytes),
        "glibc": _glibc() if glibc is None else glibc,
        "l1d_bytes": l1d["size"] if l1d else 0,
        "l1d_ways": l1d["ways"] if l1d else 0,
        "l2_bytes": l2["size"],
        "l2_ways": l2["ways"],
        "l3_bytes": l3["size"] if l3 else 0,
        "l3_ways": l3["ways"] if l3 else 0,
        "line_bytes": line,
    }


def read_sysfs_shape(cpu_dir=CPU_DIR) -> dict:
    """The ``[sysfs]`` lists of the profile (gemm-common's first read of the cache
    description, sim.platform.gemm_cache) as this host lists them: the names of ``cpu_dir``,
    ``cpu0/cache`` and ``cpu0/cache/index0`` in readdir order (``os.listdir`` keeps it),
    and which ``indexN`` are instruction caches."""
    cpu_dir = Path(cpu_dir)
    cache_dir = cpu_dir / "cpu0" / "cache"
    cache_entries = os.listdir(cache_dir)
    indexes = [n for n in cache_entries if n.startswith("index")]
    instruction = [n for n in indexes
                   if _read_or(cache_dir / n / "type") == "Instruction"]
    return {"cpu_entries": os.listdir(cpu_dir),
            "cache_entries": cache_entries,
            "index_files": os.listdir(cache_dir / sorted(indexes)[0]) if indexes else [],
            "instruction_indexes": instruction}


def _read_or(path, default=""):
    try:
        return _read(path)
    except OSError:
        return default


_RUNNING = []


def running_host():
    """This machine's ``[host]`` facts (read once per process), or None off Linux or
    where they cannot be read."""
    if not _RUNNING:
        host = None
        if platform.system() == "Linux":
            try:
                host = read_host()
            except (OSError, ValueError):
                host = None
        _RUNNING.append(host)
    return _RUNNING[0]


def _mib(value) -> str:
    if value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 20} MiB"
    if value >= 1 << 10 and value % (1 << 10) == 0:
        return f"{value >> 10} KiB"
    return f"{value} B"


def describe(host) -> str:
    """One phrase for a host: ``AMD EPYC, L2 1 MiB, 2 cores, glibc 2.36``; its operating
    system last where one is recorded (the seeds' ``experiments/measured/measure-info.json``:
    their write-ups name the Mac's system, not its cores).

    >>> describe({"cpu_model": "AMD EPYC", "l2_bytes": 1 << 20, "cores": 2, "glibc": "2.36"})
    'AMD EPYC, L2 1 MiB, 2 cores, glibc 2.36'
    >>> describe({"cpu_model": "Apple M2 Max", "os": "macOS 27"})
    'Apple M2 Max, macOS 27'
    """
    parts = [str(host.get("cpu_model") or "unknown CPU")]
    if host.get("l2_bytes"):
        parts.append(f"L2 {_mib(int(host['l2_bytes']))}")
    if host.get("cores"):
        parts.append(f"{host['cores']} cores")
    if host.get("glibc"):
        parts.append(f"glibc {host['glibc']}")
    if host.get("os"):
        parts.append(str(host["os"]))
    return ", ".join(parts)


#: the facts whose difference changes predictions, in the order the warning names them:
#: (key, label, how a value is shown)
_MATTERS = (("l2_bytes", "L2", _mib), ("cpu_model", "CPU", repr), ("l1d_bytes", "L1d", _mib),
            ("page_bytes", "page size", _mib), ("glibc", "glibc", str))


def differences(profile_host, host) -> list:
    """``(label, profile's value, this host's value)`` of every fact that matters
    (:data:`_MATTERS`: the L2 size first, then the CPU model, L1d, page size, glibc) and
    differs; a fact one side does not record is not compared.

    >>> differences({"l2_bytes": 2 << 20, "cpu_model": "X"}, {"l2_bytes": 1 << 20,
    ...             "cpu_model": "X"})
    [('L2', '2 MiB', '1 MiB')]
    """
    out = []
    for key, label, shown in _MATTERS:
        a, b = profile_host.get(key), host.get(key)
        if a in (None, "", 0) or b in (None, "", 0) or a == b:
            continue
        out.append((label, shown(a), shown(b)))
    return out


def mismatch_warning(profile, host="running"):
    """The one warning line for a Linux ``profile`` whose ``[host]`` differs from ``host``
    (default: this machine, :func:`running_host`) in a fact that matters, or None (no
    ``[host]`` table, not a Linux profile, not on Linux, or nothing differs)."""
    profile_host = profile.data.get("host")
    if not profile_host or not str(profile.data["meta"]["platform"]).startswith("linux"):
        return None
    if host == "running":
        host = running_host()
    if not host:
        return None
    diffs = differences(profile_host, host)
    if not diffs:
        return None
    named = "; ".join(f"{label} {a} in the profile, {b} here" for label, a, b in diffs)
    effects = []
    if diffs[0][0] == "L2":
        effects.append("heap bytes of programs that run a matmul are off by the L2 difference "
                       "(gemm's first-call buffer)")
    effects.append("times are the profile host's")
    return (f"sim: warning: profile {profile.name} describes another host ({named}): "
            f"{'; '.join(effects)}; make a profile for this machine with "
            f"`sim host-profile --out models/NAME.toml`")


#: ``platform.system()`` and ``platform.machine()`` names -> a profile's ``[meta] platform``'s
_KIND_NAMES = {"darwin": "macos", "arm64": "aarch64", "amd64": "x86_64"}


def host_kind(system=None, machine=None) -> str:
    """This machine's kind as a profile's ``[meta] platform`` names it (``system`` and
    ``machine``: default ``platform.system()`` and ``platform.machine()``).

    >>> host_kind("Linux", "x86_64"), host_kind("Darwin", "arm64")
    ('linux-x86_64', 'macos-aarch64')
    """
    system = str(system or platform.system()).lower()
    machine = str(machine or platform.machine()).lower()
    return f"{_KIND_NAMES.get(system, system)}-{_KIND_NAMES.get(machine, machine)}"


def profile_machine(profile) -> str:
    """The machine ``profile`` describes, in one phrase: its ``[host]`` (:func:`describe`)
    and its kind (``[meta] platform``), or the kind alone where it has no ``[host]``."""
    kind = profile.data["meta"]["platform"]
    host = profile.data.get("host")
    return f"{describe(host)} ({kind})" if host else f"a {kind} machine (no [host] table)"


def other_kind_note(profile, kind=None):
    """One line where ``profile`` describes another kind of machine than this one (``kind``:
    default :func:`host_kind`), else None: whose predictions these are, and how to get this
    machine's (``sim host-profile``, which measures a Linux host).

    >>> class Profile:
    ...     name, data = "m2max-macos", {"meta": {"platform": "macos-aarch64"},
    ...                                   "host": {"cpu_model": "Apple M2 Max", "cores": 12}}
    >>> print(other_kind_note(Profile(), "linux-x86_64"))  # doctest: +NORMALIZE_WHITESPACE
    profile m2max-macos describes Apple M2 Max, 12 cores (macos-aarch64), not this
    linux-x86_64 host: its times and memory are that machine's; `sim host-profile --out
    models/NAME.toml` makes a profile of this host
    >>> other_kind_note(Profile(), "macos-aarch64") is None
    True
    """
    here = kind or host_kind()
    if profile.data["meta"]["platform"] == here:
        return None
    return (f"profile {profile.name} describes {profile_machine(profile)}, not this {here} "
            f"host: its times and memory are that machine's; {how_to_profile(here)}")


def how_to_profile(kind) -> str:
    """How to make a profile of this machine, of ``kind`` (``sim host-profile`` measures
    Linux hosts only).

    >>> how_to_profile("macos-aarch64")
    '`sim host-profile` makes profiles of Linux hosts'
    """
    if kind.startswith("linux"):
        return "`sim host-profile --out models/NAME.toml` makes a profile of this host"
    return "`sim host-profile` makes profiles of Linux hosts"
