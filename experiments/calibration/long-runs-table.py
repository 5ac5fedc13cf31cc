#!/usr/bin/env python3
"""The long-run comparison tables of issue 43 (markdown) from `sim compare` outputs'
errors.csv: every ms_per_step point of p10-ema detach and ema-balanced detach, measured,
predicted, signed error, within issue 43's 15 %, and whether the profile was fitted on it
(`fitted`) or predicts it (`predicted`); then every rss_bytes point (the process's RSS),
within the comparison's memory tolerance. Nothing is computed here but the error in %.

    .venv/bin/python experiments/calibration/long-runs-table.py RESULTS_DIR [RESULTS_DIR ...] \\
        [--measured CSV ...]

Several results directories (compares of different measured files) are listed together.
With ``--measured`` (the CSVs the compares read), a point measured in several runs (its
note: ``mean of N fresh runs (v1, v2, ...)``, as ``sim measure --repeat`` writes it) lists
each run's value and their spread (max - min over the mean) beside the mean it is graded on.
"""

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.analysis.compare import run_range  # noqa: E402

EXPERIMENTS = ("p10-ema-params", "ema-balanced-params")
MiB = 1 << 20


def _runs(paths):
    """(experiment, variant, x, metric) -> the runs' values listed in a measured row's note."""
    out = {}
    for path in paths:
        for r in csv.DictReader(open(path)):
            note = r.get("note", "")
            if run_range(note) is None:
                continue
            inside = note[note.index("fresh runs (") + len("fresh runs ("):]
            values = [float(v.split()[0]) for v in inside[:inside.index(")")].split(",")]
            out[(r["experiment"], r["variant"], float(r["x"]), r["metric"])] = values
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--measured", action="append", default=[])
    args = parser.parse_args(argv)
    every = [r for results in args.results
             for r in csv.DictReader(open(Path(results) / "errors.csv"))
             if r["experiment"] in EXPERIMENTS]
    runs = _runs(args.measured)
    order = lambda r: (EXPERIMENTS.index(r["experiment"]), float(r["x"]))  # noqa: E731
    rows = sorted((r for r in every if r["metric"] == "ms_per_step"), key=order)
    spread = bool(runs)
    print("| experiment | run | step | measured ms | predicted ms | error | within 15 % "
          "| point |" + (" runs (ms) | spread |" if spread else ""))
    print("|---|---|---:|---:|---:|---:|---|---|" + ("---|---:|" if spread else ""))
    for r in rows:
        measured, predicted = float(r["measured"]), float(r["predicted"])
        err = (predicted - measured) / measured * 100     # signed (errors.csv's is absolute)
        ok = "yes" if abs(err) <= 15 else "**no**"
        line = (f"| {r['experiment']} | {r['variant']} | {int(float(r['x']))} | "
                f"{measured:.4g} | {predicted:.4g} | {err:+.1f}% | {ok} | {r['status']} |")
        if spread:
            values = runs.get((r["experiment"], r["variant"], float(r["x"]), r["metric"]))
            if values:
                width = (max(values) - min(values)) / measured * 100
                line += f" {', '.join(f'{v:.4g}' for v in values)} | {width:.1f}% |"
            else:
                line += " one run | |"
        print(line)
    rss = sorted((r for r in every if r["metric"] == "rss_bytes"), key=order)
    if rss:
        print()
        print("| experiment | run | step | measured RSS MiB | predicted RSS MiB | error | "
              "within tolerance | point |")
        print("|---|---|---:|---:|---:|---:|---|---|")
        for r in rss:
            measured, predicted = float(r["measured"]), float(r["predicted"])
            err = (predicted - measured) / measured * 100
            ok = "yes" if r["ok"] == "true" else "**no**"
            print(f"| {r['experiment']} | {r['variant']} | {int(float(r['x']))} | "
                  f"{measured / MiB:.1f} | {predicted / MiB:.1f} | {err:+.1f}% | {ok} | "
                  f"{r['status']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
