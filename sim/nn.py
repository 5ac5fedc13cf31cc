"""``sim.nn``: the name workload and policy files have always imported; the code is
:mod:`sim.burn.nn` (the API workloads use sits in the burn layer since the package was
laid out in layers). Imported by nothing inside ``sim``."""

from .burn.nn import *  # noqa: F401,F403
from .burn.nn import __all__  # noqa: F401
