"""Where the repository's data sits: ``models/``, ``experiments/`` and ``docs/`` beside
the ``sim`` package (a checkout, or an editable install of one)."""

from __future__ import annotations

import os
from pathlib import Path

#: the repository: the directory that holds the ``sim`` package
ROOT = Path(__file__).resolve().parent.parent
#: profiles, ``models/*.toml``
MODELS = ROOT / "models"
#: workloads, measured data, probes and patches
EXPERIMENTS = ROOT / "experiments"
DOCS = ROOT / "docs"
#: the ``sim`` package's directory with a trailing separator: a frame whose file starts
#: with it runs the simulator's code, not a workload's
PACKAGE_PREFIX = os.path.dirname(os.path.abspath(__file__)) + os.sep
