"""The ``sim`` command (``cli``) and the code of its subcommands: ``sweep`` (also
``compare`` and ``plot``), ``calibrate``, ``accuracy``, ``bench``, ``equivalence``,
``measure`` (with ``patches``), ``host_profile``, ``fixes``; ``progress``, the bar on
stderr."""
