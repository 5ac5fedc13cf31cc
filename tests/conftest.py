import sys
from pathlib import Path

import pytest

from sim.engine import Simulation
from sim.profile import load_profile

# the seed workloads' helpers (experiments/common.py) are importable as ``common``
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))


@pytest.fixture(scope="session")
def profile():
    return load_profile("m2max-macos")


@pytest.fixture
def make_sim(profile):
    def make(policy="burn-0.22.1"):
        return Simulation(profile, policy=policy)
    return make
