"""The compiled arena: Cython builds ``sim/platform/ptmalloc.py`` (with the field types
of ``ptmalloc.pxd``) into the extension module ``sim.platform._ptmalloc_c``, which
``ptmalloc.py`` adopts in place of its own classes when it was built from the same text
(a copy of the source with its SHA-256 appended is what gets compiled). Everything
else is in pyproject.toml."""

import hashlib
import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

SOURCE = Path("sim/platform/ptmalloc.py")
COPY = Path("build/cython-src/sim/platform")


def compiled_copy() -> str:
    """The source and its .pxd copied under the extension's name, the source's hash
    appended (``ptmalloc.py`` compares it with its own)."""
    text = SOURCE.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    COPY.mkdir(parents=True, exist_ok=True)
    for package in (COPY.parent, COPY):
        (package / "__init__.py").touch()
    target = COPY / "_ptmalloc_c.py"
    new = text + f"\n\nSOURCE_SHA256 = {digest!r}\n"
    if not target.exists() or target.read_text() != new:
        target.write_text(new)
    pxd = SOURCE.with_suffix(".pxd").read_text()
    if not (COPY / "_ptmalloc_c.pxd").exists() or (COPY / "_ptmalloc_c.pxd").read_text() != pxd:
        (COPY / "_ptmalloc_c.pxd").write_text(pxd)
    return str(target)


# SIM_NO_COMPILE=1: install without the compiled arena (no C compiler); it runs as Python
setup(ext_modules=[] if os.environ.get("SIM_NO_COMPILE") else cythonize(
    [Extension("sim.platform._ptmalloc_c", [compiled_copy()])], language_level=3,
    build_dir="build/cython",
    compiler_directives={"annotation_typing": False, "binding": True}))
