"""The hold scripts' start (`tlb-batch.py`, `order-pair.py`): a session of their own whose
autogroup is raised to -15 (with the kernel's autogroups, nice counts only inside a
session), and the command prefix that runs a probe on the pinned core at nice -15."""
import os
import sys

#: the prefix of every timed probe run: the pinned core, at the timing lock's priority
PIN = ["taskset", "-c", "1", "nice", "-n", "-15"]


def own_session() -> None:
    """Start a session of this process's own and raise its autogroup to -15 (a line on
    stderr where the kernel refuses)."""
    try:
        os.setsid()
    except OSError:
        pass
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-15")
    except OSError as e:
        print("autogroup:", e, file=sys.stderr)
