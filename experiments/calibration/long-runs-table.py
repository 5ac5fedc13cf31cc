#!/usr/bin/env python3
"""The long-run comparison table of issue 43 (markdown) from a `sim compare` output's
errors.csv: every ms_per_step point of p10-ema detach and ema-balanced detach, measured,
predicted, signed error, within issue 43's 15 %, and whether the profile was fitted on it
(`fitted`) or predicts it (`predicted`). Nothing is computed here but the error in %.

    .venv/bin/python experiments/calibration/long-runs-table.py RESULTS_DIR [RESULTS_DIR ...]

Several results directories (compares of different measured files) are listed together.
"""

import csv
import sys
from pathlib import Path

EXPERIMENTS = ("p10-ema-params", "ema-balanced-params")


def main(*dirs) -> int:
    rows = [r for results in dirs for r in csv.DictReader(open(Path(results) / "errors.csv"))
            if r["metric"] == "ms_per_step" and r["experiment"] in EXPERIMENTS]
    rows.sort(key=lambda r: (EXPERIMENTS.index(r["experiment"]), float(r["x"])))
    print("| experiment | run | step | measured ms | predicted ms | error | within 15 % "
          "| point |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        measured, predicted = float(r["measured"]), float(r["predicted"])
        err = (predicted - measured) / measured * 100     # signed (errors.csv's is absolute)
        ok = "yes" if abs(err) <= 15 else "**no**"
        print(f"| {r['experiment']} | {r['variant']} | {int(float(r['x']))} | "
              f"{float(r['measured']):.4g} | {float(r['predicted']):.4g} | {err:+.1f}% | "
              f"{ok} | {r['status']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
