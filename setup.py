"""The compiled cost models: Cython builds ``sim/platform/ptmalloc.py`` (the glibc arena,
with the field types of ``ptmalloc.pxd``) into the extension module
``sim.platform._ptmalloc_c``, ``sim/platform/heap.py`` (the heap every allocation and
free goes through, with ``heap.pxd``) into ``sim.platform._heap_c``, and likewise
``btree.py`` (the locator's maps) into ``_btree_c`` and ``l2_cache.py`` (the L2 model) into
``_l2_cache_c``, each with its ``.pxd``; each source adopts its
extension's classes in place of its own when it was built from the same text (a copy of
the source with its SHA-256 appended is what gets compiled). Everything else is in
pyproject.toml."""

import hashlib
import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: source -> the extension module built from it
SOURCES = {Path("sim/platform/ptmalloc.py"): "_ptmalloc_c",
           Path("sim/platform/heap.py"): "_heap_c",
           Path("sim/platform/btree.py"): "_btree_c",
           Path("sim/platform/l2_cache.py"): "_l2_cache_c"}
COPY = Path("build/cython-src/sim/platform")


def compiled_copy(source, name) -> str:
    """``source`` and its .pxd copied under the extension's ``name``, the source's hash
    appended (the source compares it with its own)."""
    text = source.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    COPY.mkdir(parents=True, exist_ok=True)
    for package in (COPY.parent, COPY):
        (package / "__init__.py").touch()
    target = COPY / f"{name}.py"
    new = text + f"\n\nSOURCE_SHA256 = {digest!r}\n"
    if not target.exists() or target.read_text() != new:
        target.write_text(new)
    pxd = source.with_suffix(".pxd").read_text()
    if not (COPY / f"{name}.pxd").exists() or (COPY / f"{name}.pxd").read_text() != pxd:
        (COPY / f"{name}.pxd").write_text(pxd)
    return str(target)


class BuildExt(build_ext):
    """``build_ext`` whose failure to compile ends with one line saying what to do."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            raise SystemExit(
                f"autodiff-sim: could not compile {ext.name} ({exc}): install a C compiler "
                "(e.g. apt-get install gcc), or install with SIM_NO_COMPILE=1 to run the cost "
                "models as Python (slower, the same rows)") from exc


# SIM_NO_COMPILE=1: install without the compiled modules (no C compiler); they run as Python
setup(cmdclass={"build_ext": BuildExt},
      ext_modules=[] if os.environ.get("SIM_NO_COMPILE") else cythonize(
    [Extension(f"sim.platform.{name}", [compiled_copy(source, name)])
     for source, name in SOURCES.items()], language_level=3,
    build_dir="build/cython",
    compiler_directives={"annotation_typing": False, "binding": True}))
