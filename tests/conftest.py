import sys

import pytest

from sim import paths
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile

# the seed workloads' helpers (experiments/common.py) are importable as ``common``
sys.path.insert(0, str(paths.ROOT / "experiments"))


@pytest.fixture(scope="session")
def profile():
    return load_profile("m2max-macos")


@pytest.fixture
def make_sim(profile):
    def make(policy="burn-0.22.1"):
        return Simulation(profile, policy=policy)
    return make


@pytest.fixture
def fresh_policy_registry():
    """The registry of policies loaded from files, emptied for the test and restored
    after it (a test loads files whose policy names another test's files reuse)."""
    import sim.policies as policies
    saved = dict(policies._FILES)
    policies._FILES.clear()
    yield
    policies._FILES.clear()
    policies._FILES.update(saved)


@pytest.fixture(autouse=True)
def _no_running_host(monkeypatch):
    """Tests do not depend on the machine they run on: the running host is unknown
    (sim.platform.host.running_host() is None), so no profile's [host] is compared with it; a
    test of the host check passes its own host."""
    import sim.platform.host
    monkeypatch.setattr(sim.platform.host, "_RUNNING", [None])
