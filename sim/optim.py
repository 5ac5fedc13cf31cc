"""``sim.optim``: the name workload and policy files have always imported; the code is
:mod:`sim.burn.optim` (the API workloads use sits in the burn layer since the package was
laid out in layers). Imported by nothing inside ``sim``."""

from .burn.optim import *  # noqa: F401,F403
from .burn.optim import __all__  # noqa: F401
