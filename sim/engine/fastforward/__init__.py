"""Fast-forward: loops of identical iterations applied in closed form (``repeat``, what
``sim.repeat`` calls), with the shapes it applies in their own modules, each importing
only the ones before it: ``arenarun`` (glibc's arena), ``replay`` (an iteration's BTreeMap
operations replayed), ``leakrun``, ``keptchain``, ``chainrun``."""
