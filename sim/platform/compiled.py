"""The compiled builds of the cost models: ``setup.py`` has Cython build
``sim/platform/ptmalloc.py`` into ``sim.platform._ptmalloc_c``, ``sim/platform/heap.py``
into ``sim.platform._heap_c``, ``btree.py`` into ``_btree_c`` and ``l2_cache.py`` into
``_l2_cache_c``, each from a copy of the source with its SHA-256 appended;
:func:`adopt_compiled` is how each source puts its build's classes in place of its own.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys

__all__ = ["adopt_compiled"]


def adopt_compiled(namespace, name, extension, pure, what) -> None:
    """Put the classes and functions of ``extension`` (the build of the module ``name``,
    whose ``namespace`` this is) in place of the module's own, when it was compiled from
    this very text; otherwise the module runs as Python (a build from an older text is
    refused with one warning line on stderr: ``pip install -e .`` builds it anew). The environment
    variable ``pure`` set keeps the Python; ``what`` names the module in the warning.
    The build itself runs this too, under its own name: it adopts nothing."""
    if os.environ.get(pure) or namespace.get("__name__") != name:
        return
    try:
        compiled = importlib.import_module(f"{name.rpartition('.')[0]}.{extension}")
    except ImportError:
        return
    with open(namespace["__file__"], "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if getattr(compiled, "SOURCE_SHA256", None) != digest:
        # the project's one warning line (a UserWarning printed its file, line and the
        # source line of the call: two lines naming this module, not the user's edit)
        print(f"sim: warning: {compiled.__file__} was compiled from another version of "
              f"{namespace['__file__']}; {what} runs as Python (`pip install -e .` "
              f"rebuilds it)", file=sys.stderr, flush=True)
        return
    namespace.update((key, value) for key, value in vars(compiled).items()
                     if not key.startswith("__") and key != "SOURCE_SHA256")
