"""A sweep killed with SIGKILL at any point leaves no half-written output, and rerunning
it resumes to byte-identical results."""

import csv
import os
import signal
import subprocess
import sys
import time

ARGS = ["sweep", "-w", "adleak-rss", "-w", "pit-infer", "-p", "burn-0.22.1",
        "-p", "skip-untracked", "--set", "iterations=3000", "--jobs", "1"]
OUTPUTS = ("predicted.csv", "errors.csv", "report.md", "report.html", "run.json")


def sweep(out, timeout=300):
    return subprocess.run([sys.executable, "-m", "sim.commands.cli", *ARGS, "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout)


def complete_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows, path
    width = len(rows[0])
    assert all(len(r) == width for r in rows), path


def test_sweep_killed_at_random_points_resumes_to_the_same_output(tmp_path):
    reference = tmp_path / "reference"
    done = sweep(reference)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "killed"
    for delay in (0.4, 1.0, 1.8, 2.6, 3.5):
        proc = subprocess.Popen([sys.executable, "-m", "sim.commands.cli", *ARGS, "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # whatever is there is whole: each output either absent or a complete file
        for name in OUTPUTS:
            path = out / name
            if path.exists() and name.endswith(".csv"):
                complete_csv(path)
        visible = [p for p in os.listdir(out) if not p.startswith(".")] if out.exists() else []
        assert all(not name.endswith(".tmp") for name in visible), visible
    finished = sweep(out)
    assert finished.returncode == 0, finished.stderr
    assert not list(out.glob(".*.tmp")), "stale temporary files left behind"
    for name in ("predicted.csv", "errors.csv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    # the report names its --out directory in the command line; otherwise identical
    report = (out / "report.md").read_text().replace(str(out), "OUT")
    assert report == (reference / "report.md").read_text().replace(str(reference), "OUT")
