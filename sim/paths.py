"""Where the simulator's files are: the ``sim`` package, found through package resources
(:func:`importlib.resources.files`, wherever it is installed from), and ``models/``,
``experiments/`` and ``docs/`` beside it (a checkout, or an editable install of one: the
profiles, workloads and measurements are the repository's data, not part of the package).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

#: the ``sim`` package's directory, as package resources locate it
PACKAGE_DIR = Path(str(resources.files("sim"))).resolve()
#: the repository: the directory that holds the ``sim`` package
ROOT = PACKAGE_DIR.parent
#: profiles, ``models/*.toml``
MODELS = ROOT / "models"
#: workloads, measured data, probes and patches
EXPERIMENTS = ROOT / "experiments"
DOCS = ROOT / "docs"
#: the ``sim`` package's directory with a trailing separator: a frame whose file starts
#: with it runs the simulator's code, not a workload's
PACKAGE_PREFIX = str(PACKAGE_DIR) + os.sep
