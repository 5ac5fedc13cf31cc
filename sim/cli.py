"""Command line: thin wrappers that parse, call, print.

Every user error (unknown name, malformed file, impossible value) is printed as
one line on stderr, ``sim: error: ...``, with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__
from .errors import UserError

__all__ = ["main", "cli"]


def _fail(message: str, code: int = 2):
    click.echo(f"sim: error: {message}", err=True)
    sys.exit(code)


def main(argv=None):
    """Entry point of the ``sim`` console script."""
    try:
        cli.main(args=argv, prog_name="sim", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "))
    except UserError as exc:
        _fail(str(exc).replace("\n", " "))
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autodiff-sim")
def cli():
    """autodiff-sim: simulate burn's autodiff graph bookkeeping (burn 0.22.1).

    Start with `sim sweep` (every workload under every policy, compared with the
    seed measurements), then `sim run WORKLOAD` to look at one program.
    """


def _policy_option(multiple=False):
    return click.option("--policy", "-p", multiple=multiple,
                        default=("all",) if multiple else "burn-0.22.1", show_default=True,
                        help="bookkeeping policy (see `sim policies`)" +
                        ("; repeatable, or 'all'" if multiple else ""))


_profile_option = click.option("--profile", default="m2max-macos", show_default=True,
                               help="profile name in models/ or a path to a .toml")


@cli.command("list")
def list_cmd():
    """List workloads (with variants and parameters), policies and profiles."""
    from .policies import POLICIES
    from .profile import profile_names
    from .workloads import builtin_names, load_workload
    click.echo("workloads:")
    for name in builtin_names():
        w = load_workload(name)
        click.echo(f"  {name:<14} {w.description}")
        click.echo(f"  {'':<14} variants: {', '.join(w.variants)}")
        params = ", ".join(f"{k}={v}" for k, v in w.params.items())
        click.echo(f"  {'':<14} params:   {params}")
    click.echo("policies:")
    for name in POLICIES:
        click.echo(f"  {name}")
    click.echo("profiles:")
    for name in profile_names():
        click.echo(f"  {name}")


@cli.command("policies")
def policies_cmd():
    """Describe every policy: what it changes in burn, what it should fix."""
    import textwrap
    from .policies import POLICIES
    for name, cls in POLICIES.items():
        click.echo(name + ("  (intended semantic change)" if cls.semantic_change else ""))
        for label, text in (("changes", cls.changes), ("expected", cls.expected)):
            wrapped = textwrap.fill(text, width=88, initial_indent=f"  {label}: ",
                                    subsequent_indent=" " * (len(label) + 4))
            click.echo(wrapped)
        click.echo()


@cli.command("run")
@click.argument("workload")
@click.option("--variant", "-v", default=None, help="variant (default: all of the workload's)")
@_policy_option()
@_profile_option
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override a workload parameter (repeatable)")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="write to this file instead of stdout")
@click.option("--max-ops", type=click.IntRange(min=1), default=50_000_000, show_default=True,
              help="stop if more steps than this are registered")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="stop after this many seconds of wall time")
def run_cmd(workload, variant, policy, profile, sets, fmt, out, max_ops, timeout):
    """Simulate one workload (a built-in name or a path to a .py file).

    Prints the observations in the measured schema (the seed program's metrics,
    plus the bookkeeping observables at each sample).
    """
    from .data import PREDICTED_COLUMNS, atomic_write, dump_json, rows_to_csv
    from .engine import Limits
    from .policies import get_policy
    from .profile import load_profile
    from .runner import run_cell
    from .workloads import load_workload, parse_sets
    w = load_workload(workload)
    get_policy(policy)
    prof = load_profile(profile)
    set_values = parse_sets(sets)
    variants = [variant] if variant else list(w.variants)
    for v in variants:
        w.resolve(v, set_values)
    if out is not None:
        _check_out_file(out)
    rows = []
    for v in variants:
        rows.extend(run_cell(w, v, policy, prof, set_values,
                             limits=Limits(max_ops=max_ops, max_wall_s=timeout)))
    if fmt == "csv":
        text = rows_to_csv(rows, PREDICTED_COLUMNS)
    elif fmt == "json":
        text = dump_json(rows)
    else:
        text = _table(rows)
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write(out, text)
        click.echo(f"wrote {len(rows)} rows to {out}", err=True)


def _check_out_file(out):
    path = Path(out)
    if path.is_dir():
        raise UserError(f"--out {out}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"--out {out}: directory {parent} does not exist")
    import os
    if not os.access(parent, os.W_OK):
        raise UserError(f"--out {out}: directory {parent} is not writable")


def _table(rows) -> str:
    from .data import format_value
    headers = ["experiment", "variant", "phase", "x", "x_unit", "metric", "value", "unit"]
    body = [[format_value(r.get(h, "")) for h in headers] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    for b in body:
        lines.append("  ".join(v.ljust(w) for v, w in zip(b, widths)))
    return "\n".join(line.rstrip() for line in lines) + "\n"


if __name__ == "__main__":
    main()
