"""The accuracy table: every measured point against its prediction, as markdown.

``sim accuracy`` runs the cells a measured set needs under one profile and
prints (or writes into the README between markers) a table with measured,
predicted, error, tolerance verdict and whether the point was used for fitting
(the profile's ``[calibration] points``) or predicted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .calibrate import run_cells
from ..analysis.compare import cells_for, join, summarize, quick_params
from ..analysis.data import atomic_write
from ..errors import UserError

__all__ = ["accuracy_rows", "markdown_table", "check_markers", "update_readme",
           "policies_target", "policy_table", "BEGIN", "END"]

BEGIN = "<!-- accuracy:begin -->"
END = "<!-- accuracy:end -->"


def accuracy_rows(measured, profile, jobs=1, policy="burn-0.22.1"):
    """Joined measured/predicted points under ``profile``."""
    fitted = profile.data.get("calibration", {}).get("points", [])
    # rows of `sim measure --quick` run with the probes' quick loop counts, as in compare
    predicted = run_cells(cells_for(measured, policy), profile, jobs, quick_params(measured))
    return join(measured, predicted, fitted, policy)


def _fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if float(v).is_integer() and abs(v) < 1e12:
        return str(int(v))
    return f"{v:.4g}"


def markdown_table(joined, title="") -> str:
    """A markdown table of the points, with a summary line."""
    lines = []
    if title:
        lines.append(title)
        lines.append("")
    counts = summarize(joined)
    parts = [f"{status}: {ok}/{n} within tolerance" for status, (ok, n) in sorted(counts.items())]
    lines.append("; ".join(parts) + " (memory 5 %, time 15 %, blocks and events exact).")
    lines.append("")
    lines.append("| experiment | variant | phase | x | metric | measured | predicted | error | ok | used |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for e in joined:
        err = e["rel_error"]
        err_text = "—" if not math.isfinite(err) else f"{err * 100:.1f} %"
        note = f" ({e['note']})" if e.get("note") else ""
        lines.append(
            f"| {e['experiment']} | {e['variant']} | {e['phase'] or ''} | {_fmt(e['x'])} | "
            f"{e['metric']} ({e['unit']}) | {_fmt(e['measured'])} | {_fmt(e['predicted'])} | "
            f"{err_text} | {'yes' if e['ok'] else '**no**'} | {e['status']}{note} |")
    return "\n".join(lines) + "\n"


def check_markers(path, begin=BEGIN, end=END) -> str:
    """The text of ``path``, which must hold the ``begin`` and ``end`` markers in that
    order (one error line otherwise: a table is only ever written between them, never
    appended to a file that does not expect it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from None
    start = text.find(begin)
    if start < 0 or text.find(end, start) < 0:
        raise UserError(f"{path}: no {begin} ... {end} markers (put them where the "
                        f"table goes)")
    return text


def update_readme(readme, table_text, begin=BEGIN, end=END) -> None:
    """Replace the block between the ``begin``/``end`` markers of ``readme``."""
    text = check_markers(readme, begin, end)
    block = f"{begin}\n{table_text}{end}"
    text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda m: block, text,
                  count=1, flags=re.S)
    atomic_write(Path(readme), text)


POLICIES_BEGIN = "<!-- policies:begin -->"
POLICIES_END = "<!-- policies:end -->"


def policies_target(readme) -> Path:
    """The file whose policy-table markers ``--policies-from`` fills: the README if it
    has them, else ``docs/policies.md`` beside it (where the README links the table)."""
    readme = Path(readme)
    for path in (readme, readme.parent / "docs" / "policies.md"):
        if path.is_file() and POLICIES_BEGIN in path.read_text(encoding="utf-8"):
            return path
    return readme


def policy_table(results_dir) -> str:
    """The answer table ("Which fix, and at what price") of a sweep's report.md."""
    report = Path(results_dir) / "report.md"
    if not report.exists():
        raise UserError(f"{report}: no such file (run `sim sweep --out {results_dir}` first)")
    text = report.read_text(encoding="utf-8")
    match = re.search(r"## Which fix, and at what price\n(.*?)\n## ", text, flags=re.S)
    if not match:
        raise UserError(f"{report}: no 'Which fix, and at what price' section")
    lines = [line for line in match.group(1).strip().splitlines()
             if line.startswith("|")]
    return "\n".join(lines) + "\n"
