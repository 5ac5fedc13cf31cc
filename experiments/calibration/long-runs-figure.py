#!/usr/bin/env python3
"""The long-run figure of issue 43: p10-ema detach and ema-balanced ms per step, measured
and predicted, the points the profile was fitted on and the points it predicts in
different marks; optionally the macOS prediction to 20,000 steps beside it.

Usage (from the repo root, after `sim compare`, see
experiments/measured/linux-x86_64/long-runs/README.md):

    .venv/bin/python experiments/calibration/long-runs-figure.py RESULTS_DIR \\
        [--macos PREDICTED.csv] --out docs/long-runs.png

RESULTS_DIR is a `sim compare` output (its errors.csv: measured, predicted and whether the
point was fitted); --macos a `sim run` CSV of p10-ema detach on m2max-macos. Nothing is
computed here: the numbers are the simulator's and the probes'.
"""

import argparse
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = (("p10-ema-params", "p10-ema detach", "C0"),
          ("ema-balanced-params", "ema-balanced detach", "C1"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="sim compare output directories")
    parser.add_argument("--macos", help="sim run CSV of p10-ema detach on m2max-macos")
    parser.add_argument("--out", required=True)
    parser.add_argument("--unsimulated", help="measured CSV of points no simulated cell "
                        "predicts (drawn as crosses: measured, not predicted)")
    args = parser.parse_args(argv)
    rows = [r for results in args.results
            for r in csv.DictReader(open(Path(results) / "errors.csv"))
            if r["metric"] == "ms_per_step"]
    panels = 2 if args.macos else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.6), squeeze=False)
    ax = axes[0][0]
    for experiment, label, color in SERIES:
        points = sorted((float(r["x"]), float(r["measured"]), float(r["predicted"]), r["status"])
                        for r in rows if r["experiment"] == experiment and float(r["x"]) > 1)
        if not points:
            continue
        # the simulated curve: solid over the fitted stretch (steps <= 500), dashed where
        # it is a prediction
        short = [p for p in points if p[0] <= 500]
        long = [p for p in points if p[0] >= 500]
        ax.plot([p[0] for p in short], [p[2] for p in short], "-", color=color, lw=1.2,
                label=f"{label}: simulated, fitted stretch")
        ax.plot([p[0] for p in long], [p[2] for p in long], "--", color=color, lw=1.2,
                label=f"{label}: simulated, predicted stretch")
        fitted = [p for p in points if p[3] == "fitted"]
        held = [p for p in points if p[3] != "fitted"]
        ax.plot([p[0] for p in fitted], [p[1] for p in fitted], "o", color=color, ms=6,
                label=f"{label}: measured, fitted (steps <= 500)")
        ax.plot([p[0] for p in held], [p[1] for p in held], "s", mfc="none", mec=color,
                mew=1.5, ms=8, label=f"{label}: measured, predicted")
        for x, m, p, _ in held:
            ax.annotate(f"{(p - m) / m:+.0%}", (x, m), textcoords="offset points",
                        xytext=(6, -12 if color == "C0" else 6), fontsize=7, color=color)
    if args.unsimulated:
        for experiment, label, color in SERIES:
            extra = sorted((float(r["x"]), float(r["value"]))
                           for r in csv.DictReader(open(args.unsimulated))
                           if r["experiment"] == experiment and r["metric"] == "ms_per_step")
            if extra:
                ax.plot([e[0] for e in extra], [e[1] for e in extra], "x", color=color,
                        ms=8, mew=1.5, label=f"{label}: measured, not simulated")
    ax.set_yscale("log")
    ax.axvspan(0, 500, color="0.92", zorder=0)
    ax.text(250, ax.get_ylim()[1] * 0.6, "fitted\n(<= 500)", ha="center", va="top",
            fontsize=8, color="0.4")
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step (CPU time, mean since the previous point)")
    ax.set_title("Linux, AMD EPYC 25/17 (KVM; L2 1 MiB, L3 32 MiB), profile amd-epyc-zen4-long",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    if args.macos:
        ax2 = axes[0][1]
        mac = sorted((float(r["x"]), float(r["value"])) for r in csv.DictReader(open(args.macos))
                     if r["metric"] == "ms_per_step" and float(r["x"]) > 1)
        ax2.plot([m[0] for m in mac], [m[1] for m in mac], "-^", color="C2", ms=4,
                 label="p10-ema detach, m2max-macos: predicted")
        ax2.set_xlabel("step")
        ax2.set_ylabel("ms per step (mean since the previous point)")
        ax2.set_title("macOS, M2 Max (published caches), prediction to 20,000 steps",
                      fontsize=9)
        ax2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
