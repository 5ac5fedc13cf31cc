"""Census of the held-out ms/step rows outside 10 %: which probe and family, which step range,
which sign, how large, and how wide the row's own runs spread.

Reads the rows `linux-x86_64-targets.py --rows CSV` wrote (one run graded with one profile)
and the run's measured CSVs (for each row's run-to-run range, `sim.analysis.compare.run_range`).
Run from the repo root:

    .venv/bin/python experiments/calibration/ms-census.py --rows ROWS.csv --measured DIR
        [--list]

A family is the probe and the part of its variant that names the mechanism (op-cost's
tracked/untracked/plain/chain, train-validate's variant and phase, backward-cost's op and
phase, p10-ema's mode); `--list` prints every miss under its family.
"""

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.analysis.compare import known_checker, measured_files, run_range  # noqa: E402
from sim.analysis.data import read_measured  # noqa: E402

TOL = 0.10


def split_point(point):
    """``(experiment, variant, phase, x, metric)`` of a point id (variants may hold '/')."""
    parts = point.split("/")
    return parts[0], "/".join(parts[1:-3]), parts[-3], float(parts[-2]), parts[-1]


def family(experiment, variant, phase):
    """The group a row is counted in: the probe and what of its variant names the mechanism."""
    if experiment == "op-cost":
        return f"op-cost {variant.split('/')[0]}"
    if experiment == "train-validate":
        return f"train-validate {phase or 'train'}"
    if experiment == "backward-cost":
        return f"backward-cost {phase}"
    if experiment in ("p10-ema", "p10-ema-adam"):
        return f"{experiment} {variant}"
    return f"{experiment} {variant.split('/')[0]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", required=True, help="the rows CSV of linux-x86_64-targets.py")
    ap.add_argument("--measured", required=True, help="the run's measured directory")
    ap.add_argument("--list", action="store_true", help="print every miss")
    args = ap.parse_args()
    notes = {}
    for path in measured_files([args.measured]):
        for m in read_measured(path, known_checker()):
            notes[(m["experiment"], m["variant"], m.get("phase", ""), float(m["x"]),
                   m["metric"])] = m.get("note", "")
    groups = defaultdict(lambda: {"rows": 0, "miss": []})
    with open(args.rows, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["status"] != "predicted":
                continue
            key = split_point(row["point"])
            if key[4] != "ms_per_step":
                continue
            measured, predicted = float(row["measured"]), float(row["predicted"])
            err = (predicted - measured) / measured
            g = groups[family(*key[:3])]
            g["rows"] += 1
            if abs(predicted - measured) > TOL * abs(measured) + 1e-9:
                runs = run_range(notes.get(key, ""))
                spread = (runs[1] - runs[0]) / 2 / measured if runs else None
                g["miss"].append((key, measured, predicted, err, spread))
    total = sum(g["rows"] for g in groups.values())
    missed = sum(len(g["miss"]) for g in groups.values())
    print(f"{missed} of {total} held-out ms/step rows outside {TOL:.0%}")
    print("| family | rows | outside 10 % | fast / slow | errors (median; range) | x | "
          "runs spread > +-10 % |")
    print("|---|---|---|---|---|---|---|")
    for name, g in sorted(groups.items(), key=lambda kv: -len(kv[1]["miss"])):
        miss = g["miss"]
        if not miss:
            continue
        errs = [m[3] for m in miss]
        fast = sum(e < 0 for e in errs)
        xs = sorted({m[0][3] for m in miss})
        wide = sum(1 for m in miss if m[4] is not None and m[4] > TOL)
        print(f"| {name} | {g['rows']} | {len(miss)} | {fast} / {len(miss) - fast} | "
              f"{statistics.median(errs):+.1%}; {min(errs):+.1%} to {max(errs):+.1%} | "
              f"{', '.join(f'{x:g}' for x in xs)} | {wide} |")
    if args.list:
        for name, g in sorted(groups.items()):
            for key, measured, predicted, err, spread in sorted(g["miss"], key=lambda m: m[3]):
                shown = "-" if spread is None else f"{spread:.0%}"
                print(f"{name:<32} {'/'.join([key[1], key[2], f'{key[3]:g}']):<40} "
                      f"{measured:>10.5g} {predicted:>10.5g} {err:+7.1%}  runs +-{shown}")


if __name__ == "__main__":
    main()
