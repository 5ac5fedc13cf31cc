import pytest

from sim.engine import Simulation
from sim.profile import load_profile


@pytest.fixture(scope="session")
def profile():
    return load_profile("m2max-macos")


@pytest.fixture
def make_sim(profile):
    def make(policy="burn-0.22.1"):
        return Simulation(profile, policy=policy)
    return make
