"""Patches of burn-autodiff: the fix policies written as Rust, applied to a copy of the crate.

A fix policy (:mod:`sim.policies`) predicts what a change of burn's bookkeeping would do;
its patch (``experiments/patches/NAME.patch``, a unified diff against burn-autodiff
0.22.1's source as cargo's registry holds it) is that change made, so ``sim measure
--patch NAME`` can measure it on real burn. This module finds the patches, applies them
to a directory (a small applier of unified diffs: every hunk's context and removed lines
must match, at the line the hunk names or nearby), and labels the result.

``--patch a+b`` applies a, then b, to the same copy; a hunk of b that no longer matches
(a touched the same lines) is one error naming both.

>>> parse_diff("--- a/x.rs\\n+++ b/x.rs\\n@@ -1,2 +1,2 @@\\n a\\n-b\\n+c\\n")[0].hunks[0].old
['a', 'b']
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..paths import EXPERIMENTS

__all__ = ["PATCHES_DIR", "BURN_AUTODIFF", "Hunk", "FilePatch", "parse_diff", "resolve",
           "apply_patch", "apply_all", "patch_label", "registry_crate", "copy_crate"]

PATCHES_DIR = EXPERIMENTS / "patches"

#: the crate the patches are written against
BURN_AUTODIFF = ("burn-autodiff", "0.22.1")

#: how far (lines) from the line a hunk names its context is looked for
_FUZZ = 200

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    header: str
    old_start: int
    old: list = field(default_factory=list)    # context and removed lines
    new: list = field(default_factory=list)    # context and added lines


@dataclass
class FilePatch:
    path: str            # relative to the crate's root (``a/`` stripped)
    hunks: list = field(default_factory=list)
    created: bool = False


def _strip(name: str) -> str:
    name = name.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return name
    return name.split("/", 1)[1] if "/" in name else name


def parse_diff(text: str, label: str = "patch") -> list:
    """The files and hunks of a unified diff (``diff -ruN`` / ``git diff`` output)."""
    files = []
    current = None
    hunk = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip(line[4:]), _strip(lines[i + 1][4:])
            if new == "/dev/null":
                raise UserError(f"{label}: deleting files is not supported ({old})")
            current = FilePatch(new, created=old == "/dev/null")
            files.append(current)
            hunk = None
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if current is None:
                raise UserError(f"{label}: line {i + 1}: a hunk before any '--- '/'+++ ' "
                                f"file header")
            hunk = Hunk(line.strip(), int(match.group(1)))
            current.hunks.append(hunk)
            i += 1
            continue
        if hunk is not None and line[:1] in (" ", "-", "+") or (hunk is not None and line == ""):
            body = line[1:]
            if line[:1] in (" ", ""):
                hunk.old.append(body)
                hunk.new.append(body)
            elif line[:1] == "-":
                hunk.old.append(body)
            else:
                hunk.new.append(body)
        i += 1
    if not files or not any(f.hunks for f in files):
        raise UserError(f"{label}: no hunks: not a unified diff")
    return files


def _apply_file(lines: list, fp: FilePatch, label: str) -> list:
    out = list(lines)
    shift = 0
    for n, hunk in enumerate(fp.hunks, 1):
        want = max(hunk.old_start - 1 + shift, 0) if hunk.old else hunk.old_start + shift
        size = len(hunk.old)
        found = None
        for delta in range(0, _FUZZ + 1):
            for at in ((want + delta,) if delta == 0 else (want - delta, want + delta)):
                if 0 <= at <= len(out) - size and out[at:at + size] == hunk.old:
                    found = at
                    break
            if found is not None:
                break
        if found is None:
            first = next((line for line in hunk.old if line.strip()), "")
            raise UserError(f"{label}: hunk {n} of {fp.path} ({hunk.header}) does not apply: "
                            f"its context (from {first.strip()[:60]!r}) is not in the file")
        out[found:found + size] = hunk.new
        shift += len(hunk.new) - size
    return out


def apply_patch(root, patch_path, label=None) -> list:
    """Apply the unified diff ``patch_path`` to the tree at ``root``; returns the files
    changed. Nothing is written unless every hunk of every file applies."""
    root = Path(root)
    patch_path = Path(patch_path)
    label = label or str(patch_path)
    try:
        text = patch_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{patch_path}: cannot read ({exc.strerror})") from None
    results = {}
    for fp in parse_diff(text, label):
        target = root / fp.path
        if fp.created:
            lines = []
        elif target.is_file():
            lines = results.get(fp.path) or target.read_text(encoding="utf-8").split("\n")
        else:
            raise UserError(f"{label}: {fp.path}: no such file in {root}")
        results[fp.path] = _apply_file(lines, fp, label)
    for rel, lines in results.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines), encoding="utf-8")
    return sorted(results)


def resolve(spec: str) -> list:
    """The patch files of ``NAME``, ``FILE.patch`` or ``a+b`` (each part either)."""
    parts = [p for p in str(spec).split("+") if p] if not Path(spec).is_file() else [spec]
    if not parts:
        raise UserError(f"--patch {spec!r}: no patch named")
    paths = []
    for part in parts:
        path = Path(part)
        if not (part.endswith(".patch") or "/" in part):
            path = PATCHES_DIR / f"{part}.patch"
        if not path.is_file():
            known = sorted(p.stem for p in PATCHES_DIR.glob("*.patch"))
            raise UserError(f"--patch {part}: no such patch (known: {', '.join(known)}; or a "
                            f"path to a .patch file)")
        paths.append(path.resolve())
    return paths


def patch_label(paths) -> str:
    """``0.22.1+NAME`` (``+a+b`` for several): the burn_version of rows measured with them."""
    return BURN_AUTODIFF[1] + "".join(f"+{Path(p).stem}" for p in paths)


def apply_all(root, paths) -> None:
    """Apply ``paths`` in order to ``root``; a later patch that meets an earlier one's
    change is an error naming both."""
    for i, path in enumerate(paths):
        try:
            apply_patch(root, path, Path(path).name)
        except UserError as exc:
            if i:
                before = " + ".join(Path(p).stem for p in paths[:i])
                raise UserError(f"{exc} (after {before}: the two patches change the same "
                                f"lines)") from None
            raise


def registry_crate(name=BURN_AUTODIFF[0], version=BURN_AUTODIFF[1], cargo_home=None):
    """The crate's source in cargo's registry, or None if cargo has not downloaded it."""
    import os
    home = Path(cargo_home or os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    found = sorted((home / "registry" / "src").glob(f"*/{name}-{version}"))
    return found[0] if found else None


def copy_crate(source, dest) -> Path:
    """A fresh copy of the crate at ``source`` in ``dest`` (replaced if present)."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    return dest
