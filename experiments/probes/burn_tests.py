"""burn's own autodiff tests against burn-autodiff 0.22.1, unpatched and with each fix's patch.

The tests live in burn's repository (``crates/burn-backend-tests/tests/autodiff/``, 80+
files, run twice by their harness: without checkpointing and with
``gradient_checkpointing()``); the published crates carry none. This script takes them
from a git directory of burn's repository (``--burn-git``, e.g. the one ``fetch
github:tracel-ai/burn`` gives) at ``--commit``, writes a scratch package outside the repo
(``experiments/probes/target-patched/burn-tests/``, ignored by git: the tests are never
copied into the repository) that builds them against burn 0.22.1 from crates.io on the
Flex backend, and runs them once per patch with burn-autodiff replaced by the patched
copy ``sim measure --patch NAME`` leaves in ``target-patched/src/NAME/`` (made here if
missing). One target dir serves every run: only burn-autodiff and its dependents rebuild.

    .venv/bin/python experiments/probes/burn_tests.py --burn-git /path/to/burn.git \\
        --out experiments/measured/linux-x86_64/patched/burn-tests.json

The result records the commit the tests came from, the host, and per patch (``none``:
unpatched) the passed, failed and ignored counts and the failing tests' names.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.commands.measure import PATCHED_DIR, _machine, prepare_patched  # noqa: E402
from sim.commands.patches import PATCHES_DIR, registry_crate  # noqa: E402

SCRATCH = PATCHED_DIR / "burn-tests"
#: the parts of burn-backend-tests the autodiff tests need: the might_panic macro (its
#: library), the harness and the common modules
PARTS = ("src", "tests/autodiff", "tests/autodiff.rs", "tests/common")
CRATE = "crates/burn-backend-tests"

MANIFEST = """\
[package]
name = "burn-backend-tests"
version = "0.22.1"
edition = "2024"
publish = false

[lib]
proc-macro = true

[features]
default = ["std", "flex"]
std = ["burn-tensor/std"]
flex = ["burn-tensor/flex"]
quantization = []

[dependencies]
burn-tensor = {{ version = "=0.22.1", default-features = false, features = ["autodiff", "std", "flex"] }}
burn-backend = {{ version = "=0.22.1" }}
burn-autodiff = {{ version = "=0.22.1", features = ["export_tests"] }}
num-traits = "0.2"
serial_test = "3"
rand = {{ version = "0.10.1", default-features = false, features = ["std_rng"] }}
proc-macro2 = "1"
quote = "1"
syn = {{ version = "2", features = ["full", "extra-traits"] }}

[dev-dependencies]
ctor = "0.10.1"

[profile.release]
debug = false
codegen-units = 16
incremental = false

[workspace]
{patch}"""

_RESULT = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")
_FAILED = re.compile(r"^test (\S+) \.\.\. FAILED$")


def extract(git_dir, commit, dest) -> None:
    """The test parts of burn-backend-tests at ``commit`` of ``git_dir`` into ``dest``."""
    data = subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit]
                          + [f"{CRATE}/{part}" for part in PARTS],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            member.name = member.name[len(CRATE) + 1:]
            if member.name:
                tar.extract(member, dest, filter="data")


def run(patch, pkg, target, threads) -> dict:
    """Build and run the autodiff tests with ``patch`` (``none``: unpatched)."""
    section = ""
    if patch != "none":
        _, ws = prepare_patched(patch)
        crate = next((PATCHED_DIR / "src" / patch).glob("burn-autodiff-*"))
        section = f'\n[patch.crates-io]\nburn-autodiff = {{ path = "{crate}" }}\n'
    (pkg / "Cargo.toml").write_text(MANIFEST.format(patch=section), encoding="utf-8")
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    t0 = time.perf_counter()
    proc = subprocess.run(["cargo", "test", "--release", "--test", "autodiff", "--",
                           f"--test-threads={threads}"], cwd=pkg, env=env,
                          capture_output=True, text=True, errors="replace")
    seconds = round(time.perf_counter() - t0, 1)
    out = proc.stdout + proc.stderr
    match = _RESULT.search(out)
    if match is None:
        errors = [line for line in out.splitlines() if line.startswith("error")]
        return {"built": False, "exit": proc.returncode, "seconds": seconds,
                "errors": errors[:10], "modules": failing_modules(out)}
    passed, failed, ignored = (int(g) for g in match.groups())
    failures = sorted(m.group(1) for m in map(_FAILED.match, out.splitlines()) if m)
    return {"built": True, "exit": proc.returncode, "seconds": seconds, "passed": passed,
            "failed": failed, "ignored": ignored, "failures": failures}


def failing_modules(out) -> list:
    """The test modules (``tests/autodiff/NAME.rs``) in which cargo reported a compile
    error: where the tests' commit uses an API burn 0.22.1 does not have."""
    found, pending = [], False
    for line in out.splitlines():
        text = line.strip()
        if text.startswith("error[") or (text.startswith("error:") and "could not" not in text):
            pending = True
        elif pending and text.startswith("-->"):
            name = re.search(r"autodiff/(\w+)\.rs:", text)
            if name and name.group(1) != "mod":
                found.append(name.group(1))
            pending = False
    return sorted(set(found))


def exclude(pkg, modules) -> None:
    """Leave ``modules`` out of the scratch copy's ``tests/autodiff/mod.rs``."""
    path = pkg / "tests" / "autodiff" / "mod.rs"
    text = path.read_text(encoding="utf-8")
    for name in modules:
        text = re.sub(rf"^mod {name};$", f"// left out: API differs from 0.22.1\n// mod {name};",
                      text, flags=re.M)
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burn-git", required=True, help="a git directory of burn's repository")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--patch", action="append", default=None,
                        help="none (unpatched), a patch name or a+b (repeatable; default: "
                             "none and every patch)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if registry_crate() is None:
        parser.error("burn-autodiff 0.22.1 is not in cargo's registry: run `sim measure` once")
    patches = args.patch or ["none"] + sorted(p.stem for p in PATCHES_DIR.glob("*.patch"))
    commit = subprocess.run(["git", "--git-dir", args.burn_git, "rev-parse", args.commit],
                            check=True, capture_output=True, text=True).stdout.strip()
    described = subprocess.run(["git", "--git-dir", args.burn_git, "show",
                                f"{commit}:Cargo.toml"], capture_output=True,
                               text=True).stdout
    version = re.search(r'^version = "([^"]+)"', described, re.M)
    pkg = SCRATCH / "pkg"
    marker = pkg / ".commit"
    if not (marker.is_file() and marker.read_text().strip() == commit):
        # a fresh extraction (new mtimes) rebuilds the test crate: only for another commit
        if pkg.exists():
            shutil.rmtree(pkg)
        pkg.mkdir(parents=True)
        extract(args.burn_git, commit, pkg)
        marker.write_text(commit + "\n")
    out_path = Path(args.out)
    result = {"tests_commit": commit,
              "tests_version": version.group(1) if version else None,
              "tests": f"{CRATE}/tests/autodiff.rs (--test autodiff, Flex backend; every "
                       f"test twice: without checkpointing and with gradient_checkpointing)",
              "against": "burn 0.22.1 from crates.io, burn-autodiff 0.22.1 (+ the patch)",
              "host": _machine(), "python": platform.python_version(), "patches": {}}
    if out_path.is_file():
        previous = json.loads(out_path.read_text(encoding="utf-8"))
        if previous.get("tests_commit") == commit:
            result["patches"] = previous.get("patches", {})
    result["excluded"] = result.get("excluded", [])
    for patch in patches:
        print(f"burn tests: {patch} ...", file=sys.stderr, flush=True)
        entry = run(patch, pkg, SCRATCH / "cargo-target", args.threads)
        if not entry["built"] and entry["modules"] and patch == "none":
            # the tests' commit is newer than 0.22.1: leave out the modules that use an API
            # 0.22.1 lacks (listed in the result), then build again
            exclude(pkg, entry["modules"])
            result["excluded"] = sorted(set(result["excluded"]) | set(entry["modules"]))
            entry = run(patch, pkg, SCRATCH / "cargo-target", args.threads)
        result["patches"][patch] = entry
        print(f"burn tests: {patch}: {entry}", file=sys.stderr, flush=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
