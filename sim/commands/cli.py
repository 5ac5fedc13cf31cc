"""Command line: thin wrappers that parse, call, print.

Every user error (unknown name, malformed file, impossible value) is printed as
one line on stderr, ``sim: error: ...``, with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import UserError
from ..paths import EXPERIMENTS
from .cliwords import Above, AtLeast, OneOf, PathOf, said, unknown_command

__all__ = ["main", "cli"]


def _fail(message: str, code: int = 2):
    click.echo(f"sim: error: {message}", err=True)
    sys.exit(code)


def main(argv=None):
    """Entry point of the ``sim`` console script (``argv``: None, the process's own
    arguments; a list: called in-process, as the tests do).

    Ctrl-C ends the command with one line, ``sim: error: interrupted``, and status 130.
    As the console script (``argv`` None) the process is the command's own: SIGINT is
    handled by :func:`sim.engine.interrupts.install` (an interrupt is never lost in a
    finalizer; a watchdog ends the process should it hang), and the exit skips the
    interpreter's teardown (:func:`sim.engine.interrupts.exit_now`); worker processes are
    stopped in either case.
    """
    from ..engine import interrupts
    own = argv is None
    if own:
        interrupts.install()
    try:
        cli.main(args=argv, prog_name="sim", standalone_mode=False)
        sys.stdout.flush()          # a reader that went away (`| head`) fails here
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _interrupted(own)
    except click.ClickException as exc:
        _fail(said(exc).replace("\n", " "))
    except UserError as exc:
        _fail(str(exc).replace("\n", " "))
    except (KeyboardInterrupt, _Interrupted):
        _interrupted(own)
    except BrokenPipeError:
        _reader_gone()


def _interrupted(own):
    from ..engine.interrupts import exit_now
    from ..engine.workers import stop_all
    if own:
        exit_now(130)
    stop_all()
    _fail("interrupted", 130)


def _reader_gone():
    """The reader of stdout went away (``sim policies | head``): not an error. What is
    still buffered goes to /dev/null, so the interpreter's own flush at exit does not
    fail again (and exit 1)."""
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


class _Interrupted(Exception):
    """Ctrl-C while a command ran, past click (which would print a blank line for it)."""


class _SimGroup(click.Group):
    """The command group; a reader of stdout that goes away while a command prints
    (``sim policies | head``) ends the command with status 0, where click's own handler
    would exit 1."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise unknown_command(name, self.list_commands(ctx))
        return super().resolve_command(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _reader_gone()
        except KeyboardInterrupt:
            raise _Interrupted() from None


@click.group(cls=_SimGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autodiff-sim")
def cli():
    """autodiff-sim: simulate burn's autodiff graph bookkeeping (burn 0.22.1).

    Start with `sim sweep` (every workload under every policy, compared with the
    seed measurements), then `sim run WORKLOAD` to look at one program.
    """


def _policy_option(multiple=False):
    return click.option("--policy", "-p", multiple=multiple,
                        default=("all",) if multiple else "burn-0.22.1", show_default=True,
                        help="bookkeeping policy (see `sim policies`), or a .py file "
                             "defining your own" +
                        ("; repeatable, or 'all'" if multiple else
                         "; 'all' runs every built-in policy (their rows in the order "
                         "`sim policies` lists them)"))


_profile_option = click.option("--profile", default="m2max-macos", show_default=True,
                               help="profile name in models/ or a path to a .toml")


@cli.command("list")
def list_cmd():
    """List workloads (with variants and parameters), policies and profiles."""
    import shutil
    import textwrap
    from ..policies import POLICIES
    from ..engine.profile import profile_names
    from ..engine.workloads import builtin_names, load_workload
    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))

    def block(label, text, indent=6):
        """``text`` wrapped to the terminal, its lines indented below ``label``."""
        lead = " " * indent + label
        click.echo(textwrap.fill(text, width, initial_indent=lead,
                                 subsequent_indent=" " * (indent + len(label)),
                                 break_on_hyphens=False))

    click.echo("workloads:  (*: in `sim sweep`'s default set, its `-w all`; the others by "
               "name, `-w NAME`)")
    for name in builtin_names():
        w = load_workload(name)
        about = w.description
        if about.startswith(f"{name}: "):        # the description names its workload
            about = about[len(name) + 2:]
        click.echo(f"  {name}" + ("  *" if w.sweep else ""))
        block("", about)
        block("variants: ", ", ".join(w.variants))
        params = ", ".join(f"{k}={v}" + (f" ({'|'.join(map(str, w.choices[k]))})"
                                           if k in w.choices else "")
                           for k, v in w.params.items())
        block("params:   ", params)
    click.echo("policies:  (sim policies: what each changes, and the seams)")
    for name in POLICIES:
        click.echo(f"  {name}")
    click.echo("profiles:")
    for name in profile_names():
        click.echo(f"  {name}")


@cli.command("policies")
@click.argument("files", nargs=-1, metavar="[FILE.py]...")
def policies_cmd(files):
    """Describe every policy: what it changes in burn, what it should fix; then the
    seams a policy overrides, each with the burn code it stands for.

    With FILE.py arguments, describe (and check) the policies those files define
    instead: what `--policy FILE.py` will run.
    """
    import textwrap
    from ..policies import (HOOKS, MIRROR, POLICIES, SEAMS, Policy, load_policy_file,
                            policy_file, replaced)
    chosen = [load_policy_file(f) for f in files] if files else list(POLICIES.values())
    for cls in chosen:
        name = cls.name
        where = f"  (from {policy_file(name)})" if policy_file(name) else ""
        click.echo(name + where +
                   ("  (intended semantic change)" if cls.semantic_change else ""))
        for label, text in (("changes", cls.changes), ("expected", cls.expected)):
            wrapped = textwrap.fill(text, width=88, initial_indent=f"  {label}: ",
                                    subsequent_indent=" " * (len(label) + 4))
            click.echo(wrapped)
        seams = [s for s in (*SEAMS, *HOOKS)
                 if getattr(cls, s, None) is not getattr(Policy, s, None)]
        if seams:
            click.echo(textwrap.fill(", ".join(seams), width=88, initial_indent="  overrides: ",
                                     subsequent_indent=" " * 13))
        for label, burns in (("replaces", True), ("adds", False)):
            methods = [f"{attr}.{m}" for attr, names in replaced(cls).items() for m in names
                       if hasattr(MIRROR[attr][0], m) == burns]
            if methods:
                click.echo(textwrap.fill(", ".join(methods), width=88,
                                         initial_indent=f"  {label}: ",
                                         subsequent_indent=" " * (len(label) + 4)))
        click.echo()
    if not files:
        width = max(map(len, list(SEAMS) + list(HOOKS)))
        for title, table in (("seams (methods of sim.policies.Policy a fix overrides; "
                              "where each is in burn 0.22.1):", SEAMS),
                             ("also overridable:", HOOKS)):
            click.echo(title)
            for seam, text in table.items():
                click.echo(f"  {seam:<{width}}  {text}")
        click.echo("mirror classes (a fix replaces one with a subclass whose method is the "
                   "patched one):")
        width = max(map(len, MIRROR))
        for attr, (_, text) in MIRROR.items():
            click.echo(f"  {attr:<{width}}  {text}")


#: the memory budget of a run, or of each cell of a sweep (`sim run`, `sweep`, `compare`)
_max_nodes_option = click.option(
    "--max-nodes", type=AtLeast(1), default=5_000_000, show_default=True,
    help="stop if more simulated nodes than this are held individually (memory; each "
         "chunk of a glibc arena counts as a quarter node)")
_jobs_option = click.option(
    "--jobs", "-j", type=AtLeast(1), default=None,
    help="local worker processes  [default: the CPUs available]")
_reuse_option = click.option(
    "--no-reuse", "no_reuse", is_flag=True,
    help="simulate every cell, also one whose policy the run of another policy's cell "
         "proves cannot change (by default such a cell gets that cell's rows)")


@cli.command("run")
@click.argument("workload")
@click.option("--variant", "-v", default=None, help="variant (default: all of the workload's)")
@_policy_option()
@_profile_option
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override a workload parameter (repeatable)")
@click.option("--format", "fmt", type=OneOf(["table", "csv", "json"]), default=None,
              help="output format  [default: from --out's suffix (.csv, .json), else table]")
@click.option("--out", type=PathOf(dir_okay=False), default=None,
              help="write to this file instead of stdout")
@click.option("--max-ops", type=AtLeast(1), default=50_000_000, show_default=True,
              help="stop if more steps than this are registered")
@click.option("--timeout", type=Above(0), default=None,
              help="stop after this many seconds of wall time (each variant x policy's run)")
@_max_nodes_option
@click.option("--max-elements", type=AtLeast(1), default=None,
              help="refuse a tensor with more elements than this  [default: 2^32]")
@click.option("--exact", is_flag=True,
              help="simulate every loop iteration (no fast-forward); dead single-node graphs "
                   "are kept as run records, so memory stays ~100 B per dropped untracked op")
@_jobs_option
@_reuse_option
def run_cmd(workload, variant, policy, profile, sets, fmt, out, max_ops, timeout, max_nodes,
            max_elements, exact, jobs, no_reuse):
    """Simulate one workload (a built-in name or a path to a .py file).

    Prints the observations in the measured schema (the seed program's metrics,
    plus the bookkeeping observables at each sample). Its runs (each variant under
    each policy, in that order) go through `sim sweep`'s cells: on --jobs processes,
    a policy's run given another's rows where that run proves they are the same
    (--no-reuse: each simulated), the rows in the same order whatever ran them.
    """
    from ..analysis.data import (PREDICTED_COLUMNS, atomic_write, dump_json, output_target,
                                 rows_to_csv)
    from ..errors import LimitExceeded
    from ..policies import POLICIES, get_policy
    from ..engine.profile import load_profile
    from ..engine.workloads import load_workload, parse_sets
    from .sweep import Cell, default_jobs, run_cells, warn_host, workload_ref
    w = load_workload(workload)
    # `-p all`: every built-in policy, the rows told apart by their policy column
    policies = list(POLICIES) if policy == "all" else [get_policy(policy).name]
    prof = load_profile(profile)
    warn_host(prof)
    set_values = parse_sets(sets)
    variants = [variant] if variant else list(w.variants)
    for v in variants:
        w.resolve(v, set_values)
    if out is not None:
        _check_out_file(out)
    if fmt is None:
        suffix = Path(out).suffix.lower() if out else ""
        fmt = {".csv": "csv", ".json": "json"}.get(suffix, "table")

    def rows_text(rows):
        if fmt == "csv":
            return rows_to_csv(rows, PREDICTED_COLUMNS)
        return dump_json(rows) if fmt == "json" else _table(rows)

    def heartbeat(cell):
        return f"{w.name}/{cell.variant}" + (f" {cell.policy}" if len(policies) > 1 else "")
    cells = [Cell(workload_ref(w), v, p, tuple(set_values.items()))
             for v in variants for p in policies]
    try:
        ran = run_cells(cells, prof, None, jobs or default_jobs(), progress=False,
                        reuse=not no_reuse, exact=exact, max_elements=max_elements,
                        timeout=timeout, max_nodes=max_nodes, max_ops=max_ops,
                        heartbeat=heartbeat, in_order=True)
    except LimitExceeded as exc:
        # a budget: the rows sampled before it are kept beside --out, never as it (not
        # beside a device or FIFO: --out /dev/null asks for nothing to be kept)
        rows = exc.rows_before + getattr(exc, "rows", [])
        if out is None or output_target(out)[1]:
            raise
        if not rows:
            if Path(f"{out}.partial").is_file():
                raise LimitExceeded(f"{exc}; no rows were sampled before it ({out}.partial "
                                    f"is an earlier run's)") from None
            raise
        atomic_write(f"{out}.partial", rows_text(rows))
        raise LimitExceeded(f"{exc}; the {len(rows)} rows sampled before it are in "
                            f"{out}.partial") from None
    rows = ran.ordered_rows()
    text = rows_text(rows)
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write(out, text)
        reused = (f" ({len(ran.reused)} of {len(cells)} runs given an equivalent policy's "
                  f"rows)" if ran.reused else "")
        click.echo(f"wrote {len(rows)} rows to {out}{reused}{_drop_stale_partial(out)}",
                   err=True)


def _drop_stale_partial(out) -> str:
    """Remove ``OUT.partial`` once a run wrote ``OUT`` whole: its rows are of an earlier
    run a budget stopped, and beside a complete OUT they read as part of it. Returns the
    note for the line that says OUT was written (empty if there was none)."""
    from ..analysis.data import output_target
    stale = Path(f"{out}.partial")
    if output_target(out)[1] or not stale.is_file():
        return ""
    try:
        stale.unlink()
    except OSError as exc:
        return f"; {stale} is an earlier stopped run's, not removed ({exc.strerror})"
    return f"; removed {stale} (an earlier run's, stopped by a budget)"


@cli.command("calibrate")
@click.option("--measured", "measured_paths", multiple=True,
              metavar="CSV|DIR",
              help="measured data in the schema: a CSV or a directory of them (repeatable)")
@click.option("--profile", "base", default="m2max-macos", show_default=True,
              help="base profile (name or .toml path)")
@click.option("--fit", "params", multiple=True, metavar="PARAM",
              help="profile parameter to fit, e.g. time.scan_node_ns (repeatable; not a "
                   "[layout] one; needs --measured)")
@click.option("--tlb", "tlb_dir", type=PathOf(file_okay=False), default=None, metavar="DIR",
              help="instead of a fit: write the data TLB's [process] dtlb_entries, dtlb_ways "
                   "and [time] sweep_tlb_read_ns from the sweep-scan probe's `tlb` output in "
                   "DIR (tlb.csv, tlb.stderr; the host from a 'host:' line or lscpu.txt), and "
                   "its miss curves [time] sweep_tlb_miss_* from the `tlbr` rows in DIR/tlbr/ "
                   "and sweep_tlb_order_* (in the orphan sweep's own order) from the `order` "
                   "rows in DIR/order/ (each empty without them)")
@click.option("--process-parts", "parts_path", type=PathOf(), default=None,
              metavar="CSV|DIR",
              help="instead of a fit: write [process] baseline_rss_bytes (the mean RSS before "
                   "any burn code) and [code] gemv_bytes (the mean text the first "
                   "single-row forward adds) from the train-validate probe's PROBE_PARTS rows "
                   "(DIR/parts.csv, as `sim host-profile` writes it, or a CSV of the same "
                   "columns), and their source in [host.sources]")
@click.option("--heap-refault", "refault_path", type=PathOf(), default=None,
              metavar="CSV|DIR",
              help="instead of a fit: write [time] trim_cycle_ns and trim_page_ns (a trim of "
                   "the glibc arena's top: its two brk calls, and per page given back) from "
                   "mechanism-cost heap-refault's brk-per-trim rows (a CSV, or a directory "
                   "of them with the host in host.txt), and their source in [host.sources]")
@click.option("--points", multiple=True, metavar="SELECTOR",
              help="fit only these points: experiment/variant/phase/x/metric (5 fields, "
                   "phase often empty: p10-ema/detach//500/ms_per_step), * wildcards "
                   "(repeatable; each must match a measured point; default: every "
                   "measured point)")
@click.option("--out", type=PathOf(dir_okay=False), default=None,
              help="write the calibrated profile here (e.g. models/NEW.toml); without it "
                   "nothing is written")
@click.option("--force", is_flag=True,
              help="let --out overwrite an existing file other than the base profile")
@click.option("--fresh", is_flag=True,
              help="start a new calibration record: forget the base profile's list of "
                   "fitted parameters and points (default: a staged calibration adds to it, "
                   "less the base's points this fit moves without fitting them)")
@click.option("--max-iterations", type=AtLeast(1), default=8, show_default=True,
              help="Gauss-Newton iterations at most (each simulates the fitted cells once "
                   "per parameter, plus the line search)")
@click.option("--jobs", "-j", type=AtLeast(1), default=1, show_default=True,
              help="local worker processes for the cells")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="run the fitted cells with this workload parameter during the fit "
                   "where their workload has it, e.g. steps=500 when the fitted points are "
                   "at steps <= 500 (the table and the check of the base's points run the "
                   "cells as measured; repeatable)")
@click.option("--policy", "-p", default=None, metavar="NAME",
              help="fit to this policy's predictions (default: the patch the measured rows' "
                   "burn_version names, 0.22.1+NAME from `sim measure --patch NAME`, else "
                   "burn-0.22.1); e.g. time.drop_release_node_ns on drop-release's "
                   "patched burn")
@click.option("--against", "against_paths", multiple=True, metavar="CSV|DIR",
              help="unpatched burn's measurements from the same probes: fit what the patch "
                   "adds at each fitted point (its value less unpatched burn's, plus "
                   "burn-0.22.1's prediction; repeatable)")
def calibrate_cmd(measured_paths, base, params, tlb_dir, parts_path, refault_path, points, out,
                  force, fresh, max_iterations, jobs, sets, policy, against_paths):
    """Fit --fit parameters of a profile to measured points (least squares).

    Prints every point's measured value, the prediction before and after, the
    error, and whether the point was fitted or predicted. --out is checked
    before the fit (an existing file other than the base needs --force; the
    directory must take a new file). Details: docs/calibrate.md.
    """
    from .calibrate import calibrate, calibrate_parts, calibrate_tlb, calibrate_trim
    from ..analysis.compare import known_checker, measured_files
    from ..analysis.data import read_measured
    if sum(given is not None for given in (tlb_dir, parts_path, refault_path)) > 1:
        raise UserError("--tlb, --process-parts and --heap-refault write measured values of "
                        "different probes: give one of them")
    for option, given, write, what in (
            ("--process-parts", parts_path, calibrate_parts, "measured values"),
            ("--tlb", tlb_dir, calibrate_tlb, "measured TLB values"),
            ("--heap-refault", refault_path, calibrate_trim, "measured trim costs")):
        if given is None:
            continue
        if params or measured_paths or points or sets:
            raise UserError(f"{option} writes {what} without a fit: give it without "
                            "--fit, --measured, --points and --set")
        if out is not None:
            _check_out_file(out)
        write(base, given, out, force, echo=click.echo)
        return
    if not measured_paths:
        raise UserError("give --measured CSV|DIR (the points to fit), or --tlb DIR, "
                        "--process-parts CSV|DIR or --heap-refault CSV|DIR")
    if not params:
        raise UserError("nothing to fit: give at least one --fit PARAM")
    measured = []
    known = known_checker()
    for path in measured_files(measured_paths):
        measured.extend(read_measured(path, known))
    if out is not None:
        _check_out_file(out)
    overrides = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item}: expected KEY=VALUE")
        overrides[key] = value
    calibrate(measured, base, list(params), list(points), out, jobs, echo=click.echo,
              fresh=fresh, max_iterations=max_iterations, progress=True, force=force,
              sources=list(measured_paths) + [f"{p} (unpatched, --against)" for p in against_paths],
              warn=lambda line: click.echo(line, err=True),
              sets=overrides, policy=policy,
              against=_read_all(against_paths, known) if against_paths else None)


def _read_all(paths, known) -> list:
    """The measured rows of every CSV of ``paths`` (files or directories)."""
    from ..analysis.compare import measured_files
    from ..analysis.data import read_measured
    rows = []
    for path in measured_files(paths):
        rows.extend(read_measured(path, known))
    return rows


@cli.command("accuracy")
@click.option("--measured", "measured_paths", multiple=True, metavar="CSV|DIR",
              help="measured data, a CSV or a directory of them (default: the seed "
                   "measurements)")
@_profile_option
@click.option("--readme", type=PathOf(dir_okay=False, exists=True), default=None,
              help="write the table into this README between the accuracy markers")
@click.option("--policies-from", "policies_from",
              type=PathOf(file_okay=False, exists=True), default=None,
              help="with --readme: also copy the policy table of this sweep's report.md "
                   "between the policy markers of the README, or of docs/policies.md "
                   "beside it")
@click.option("--jobs", "-j", type=AtLeast(1), default=1, show_default=True,
              help="local worker processes for the cells")
def accuracy_cmd(measured_paths, profile, readme, policies_from, jobs):
    """Measured vs predicted for every measured point, as a markdown table."""
    from .accuracy import (POLICIES_BEGIN, POLICIES_END, accuracy_rows, check_markers,
                           markdown_table, policies_target, policy_table, update_readme)
    from ..analysis.compare import known_checker, measured_files
    from ..analysis.data import read_measured
    from ..engine.profile import load_profile
    if policies_from and not readme:
        raise UserError("--policies-from needs --readme (the file whose markers it fills)")
    # every file the command will write, checked before the cells run
    if readme:
        check_markers(readme)
    if policies_from:
        policies = policy_table(policies_from)
        target = policies_target(readme)
        check_markers(target, POLICIES_BEGIN, POLICIES_END)
    prof = load_profile(profile)
    paths = measured_files(measured_paths or [str(_default_measured())])
    measured = []
    known = known_checker()
    for path in paths:
        measured.extend(read_measured(path, known))
    joined = accuracy_rows(measured, prof, jobs)
    title = f"Profile `{prof.name}`, measured: {', '.join(Path(p).name for p in paths)}."
    text = markdown_table(joined, title)
    if readme:
        if policies_from:
            update_readme(target, policies, POLICIES_BEGIN, POLICIES_END)
            if target != Path(readme):
                click.echo(f"updated {target}", err=True)
        update_readme(readme, text)
        click.echo(f"updated {readme}", err=True)
    else:
        click.echo(text, nl=False)


def _default_measured():
    return EXPERIMENTS / "measured" / "seeds-m2max.csv"


@cli.command("bench")
@_profile_option
@click.option("--quick", is_flag=True, help="20x fewer iterations")
@click.option("--json", "json_out", type=PathOf(dir_okay=False), default=None,
              help="also write the results as JSON here")
def bench_cmd(profile, quick, json_out):
    """Measure simulated ops/s (exact and fast-forward), the event floor of the add
    loops (their heap events and objects alone), memory per live node and long runs."""
    from .bench import format_table, run_bench, to_json
    from ..analysis.data import atomic_write
    from ..engine.profile import load_profile
    if json_out is not None:
        _check_out_file(json_out, "--json")
    load_profile(profile)     # a bad profile is an error before any case runs
    click.echo("running benchmark cases...", err=True)
    result = run_bench(profile, quick, echo=lambda line: click.echo(line, err=True))
    click.echo(format_table(result), nl=False)
    if json_out:
        atomic_write(json_out, to_json(result))


@cli.command("measure")
@click.option("--probe", "probes", multiple=True, metavar="NAME",
              help="probe to run (repeatable; default all): adleak-rss, adleak-count, "
                   "pit-infer, p10-ema, p10-ema-adam, sizeof, alloc-trace, params, "
                   "train-validate, op-cost, backward-cost, mechanism-cost")
@click.option("--quick", is_flag=True, help="loop counts cut ~10x (all probes in seconds)")
@click.option("--out", required=True, type=PathOf(file_okay=False),
              help="directory for the CSVs (created if missing)")
@click.option("--repeat", type=AtLeast(1), default=1, show_default=True,
              help="run each probe N times and merge: a value that varies between runs "
                   "becomes their mean, its note listing every run")
@click.option("--patch", "patch", metavar="NAME|FILE.patch",
              help="build the probes against burn-autodiff 0.22.1 with this patch "
                   "(experiments/patches/NAME.patch or a file; a+b applies both); rows "
                   "are tagged burn_version 0.22.1+NAME")
@click.option("--gpu", is_flag=True,
              help="run the GPU probes instead (experiments/probes/gpu-probes: burn's wgpu "
                   "backend on a Vulkan device; --probe pit-infer, adleak, train-step, "
                   "large-forward, cleanup); needs libvulkan1 and mesa-vulkan-drivers")
@click.option("--burn", "burn", metavar="VERSION",
              help="build the probes against this release of burn from crates.io instead "
                   "of 0.22.1 (e.g. 0.23.0-pre.1); a build that fails names where its API "
                   "differs; rows are tagged burn_version VERSION")
@click.option("--cpu-time", "cpu_time", is_flag=True,
              help="time with each probe thread's CPU clock instead of wall time (leaves out "
                   "the time a probe waited for a CPU other jobs held: a shared machine)")
def measure_cmd(probes, quick, out, repeat, patch, gpu, burn, cpu_time):
    """Measure real burn: build the Rust probes (cargo) and run them, CSVs into --out.

    Builds experiments/probes (burn 0.22.1 from crates.io, release, cached target
    dir: minutes the first time), runs each probe and checks its CSV against the
    measured schema. Compare the result with `sim compare --measured OUT --profile
    linux-x86_64` (it skips the raw allocation traces, alloc-trace-events.csv and
    sizeof-alloc.csv: they are not measured points).
    """
    from .measure import measure
    measure(list(probes), quick, out, repeat=repeat, patch=patch, gpu=gpu, burn=burn,
            cpu_time=cpu_time)


@cli.command("host-profile")
@click.option("--out", required=True, type=PathOf(dir_okay=False),
              help="the profile to write, e.g. models/NAME.toml (then --profile NAME)")
@click.option("--base", default="linux-x86_64", show_default=True,
              help="the Linux profile whose structure, layouts and untouched values it keeps")
@click.option("--measured-out", "measured_out", type=PathOf(file_okay=False), default=None,
              help="where the quick probes' CSVs go (kept, to compare with)  "
                   "[default: results/host-profile-NAME]")
@click.option("--reuse-measured", is_flag=True,
              help="fit on the CSVs already in --measured-out instead of running the probes")
@click.option("--force", is_flag=True, help="overwrite an existing --out")
@click.option("--log", type=PathOf(dir_okay=False), default=None,
              help="also write the fit's table of points (sim calibrate's output) here")
@click.option("--jobs", "-j", type=AtLeast(1), default=None,
              help="local worker processes for the fit's simulations  [default: the CPUs "
                   "available]")
@click.option("--cpu-time", "cpu_time", is_flag=True,
              help="the probes time with their thread's CPU clock (sim measure --cpu-time): "
                   "on a machine other jobs share")
def host_profile_cmd(out, base, measured_out, reuse_measured, force, log, jobs, cpu_time):
    """Make a profile for this machine: host facts, quick probes, a fit of the time
    parameters.

    Reads the CPU model, caches (sizes, ways), page size, glibc version and cores from
    the system, runs the quick probes (`sim measure --quick`: builds them with cargo
    the first time), mechanism-cost's leak-replay (for heap_page_write_ns),
    report-wake (for report_wake_ns), gen-window (for lift_ns) and leak-fault (the op's
    fault-free rows, in register_ns's stage), and the sweep-scan
    probe's `tlb` rows (the data TLB's entries, ways and cost of a miss, as `sim calibrate --tlb` writes them, on x86_64), runs the
    train-validate probe with PROBE_PARTS (30 short processes: the RSS before any burn
    code and a first forward's text, as `sim calibrate --process-parts` writes them),
    and fits the time parameters listed in the README ("A profile for
    your machine") on the quick points that isolate them (mechanism-cost, op-cost,
    backward-cost, params, p10-ema), derives tape_step_ns, backward_step_ns and
    drop_release_node_ns from others; writes --out atomically with a [host] table
    saying where each value came from. A progress line on stderr throughout; on the shared
    2-vCPU AMD EPYC it was made on, the fit alone (--reuse-measured) took 5-7 minutes at
    load 1-11 and 52 at load 15-19, a cold cargo build of the probes adds ~8 (README).
    """
    from .host_profile import host_profile
    if log is not None:
        _check_out_file(log, "--log")
    from .sweep import default_jobs
    host_profile(out, base, measured_out, force, jobs or default_jobs(),
                 reuse_measured=reuse_measured, log=log, cpu_time=cpu_time)


def _check_out_file(out, option="--out"):
    """One error line, before any work, for an output file that cannot be written
    (:func:`sim.analysis.data.check_output_file`)."""
    from ..analysis.data import check_output_file
    check_output_file(out, option)


def _table(rows) -> str:
    from ..analysis.data import format_value
    headers = ["experiment", "variant", "phase", "x", "x_unit", "metric", "value", "unit"]
    body = [[format_value(r.get(h, "")) for h in headers] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    for b in body:
        lines.append("  ".join(v.ljust(w) for v, w in zip(b, widths)))
    return "\n".join(line.rstrip() for line in lines) + "\n"


_scheduler_option = click.option(
    "--scheduler", metavar="ADDRESS", default=None,
    help="run the cells on this dask distributed scheduler (needs the 'dask' extra)")
_force_option = click.option("--force", is_flag=True,
                             help="simulate every cell again instead of reusing finished ones")
_max_elements_option = click.option(
    "--max-elements", type=AtLeast(1), default=None,
    help="refuse a tensor with more elements than this  [default: 2^32]")
_cell_timeout_option = click.option(
    "--timeout", type=Above(0), default=None,
    help="seconds of wall time one cell may run: a cell past it stops the run with one "
         "error (the finished cells stay cached; the results of the run before are left "
         "as they were)")
_grid_option = click.option(
    "--set", "sets", multiple=True, metavar="KEY=V1,V2,...",
    help="sweep a workload parameter over values (repeatable: a grid); applies to the "
         "workloads that have KEY; a string parameter takes its value whole")


def _figures(info, out) -> str:
    """``"N figures -> OUT/report.html"`` (one figure; no doubled slash after OUT)."""
    count = len(info["figures"])
    return f"{_plural(count, 'figure')} -> {Path(out) / 'report.html'}"


def _plural(count, noun) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _sweep_done(info, out):
    reused = len(info.get("reused", ()))
    click.echo(f"{_plural(info['cells'], 'cell')} ({info['computed']} simulated, "
               f"{reused} from an equivalent policy's run, {info['cached']} cached), "
               f"{_figures(info, out)}")
    click.echo(f"wall time {info['wall_s']:.1f} s")
    hosts = info.get("hosts", {})
    # whose predictions these are: the profile's machine; another kind than this one (the
    # default macOS profile on Linux) in the one line that says so and names host-profile
    click.echo(hosts.get("note") or f"profile {info['profile']} describes {hosts['profile']}")


@cli.command("sweep")
@click.option("--workload", "-w", "workloads", multiple=True, default=("all",),
              show_default=True, help="workload name or .py file; repeatable, or 'all': "
              "the default set, the workloads `sim list` marks with * (the seeds' programs; "
              "the others only by name)")
@_policy_option(multiple=True)
@_profile_option
@click.option("--measured", "measured", multiple=True, metavar="CSV|DIR",
              help="measured data to compare with: a CSV, or a directory of them (e.g. "
                   "`sim measure --out DIR`); repeatable  "
                   "[default: experiments/measured/seeds-m2max.csv]")
@click.option("--out", default="results", show_default=True, type=PathOf(file_okay=False),
              help="results directory")
@_jobs_option
@_scheduler_option
@_force_option
@_reuse_option
@_grid_option
@_max_elements_option
@click.option("--exact", is_flag=True,
              help="simulate every loop iteration (no fast-forward): the same rows, slower; "
                   "to check fast-forward on your grid")
@_cell_timeout_option
@_max_nodes_option
def sweep_cmd(workloads, policy, profile, measured, out, jobs, scheduler, force, no_reuse, sets,
              max_elements, exact, timeout, max_nodes):
    """Run workloads x variants x policies (x --set grid) and compare with measurements.

    Writes OUT/predicted.csv, OUT/errors.csv, one figure per workload,
    OUT/summary.png, OUT/report.html and OUT/report.md. Finished cells are
    cached in OUT/.cache and reused by the next run (unless --force), so an
    interrupted sweep resumes where it stopped.
    """
    from .sweep import default_jobs, sweep
    info = sweep(workloads, policy, profile, measured, out, jobs or default_jobs(), scheduler,
                 force, sets, command=_command_line(), reuse=not no_reuse, exact=exact,
                 max_elements=max_elements, timeout=timeout, max_nodes=max_nodes)
    _sweep_done(info, out)


@cli.command("compare")
@click.argument("more_measured", nargs=-1, metavar="[CSV|DIR]...")
@click.option("--measured", "measured", multiple=True, metavar="CSV|DIR",
              help="measurements in the schema: a CSV, or a directory of them (e.g. "
                   "`sim measure --out DIR`); repeatable, and further CSVs may follow "
                   "as arguments")
@click.option("--workload", "-w", "workloads", multiple=True,
              help="only the rows of this workload (repeatable; default: every row)")
@click.option("--policy", "-p", "policies", multiple=True, default=("burn-0.22.1",),
              show_default=True, help="policy whose predictions to compare with (repeatable)")
@_profile_option
@click.option("--out", default="results/compare", show_default=True,
              type=PathOf(file_okay=False), help="results directory")
@_jobs_option
@_scheduler_option
@_force_option
@_reuse_option
@_grid_option
@_max_elements_option
@_cell_timeout_option
@_max_nodes_option
def compare_cmd(more_measured, measured, workloads, policies, profile, out, jobs, scheduler,
                force, no_reuse, sets, max_elements, timeout, max_nodes):
    """Plot your own measurements (CSV in the schema) against predictions, with errors.

    Runs only the cells the CSV needs and writes the same files as `sim sweep`.
    `--measured DIR` reads every measured CSV of a `sim measure --out DIR`
    directory (its allocation traces are skipped), as does `--measured DIR/*.csv`.
    """
    from .sweep import compare, default_jobs
    measured = list(measured) + list(more_measured)
    if not measured:
        raise UserError("compare needs --measured CSV|DIR (measurements in the schema)")
    info = compare(measured, workloads, policies, profile, out, jobs or default_jobs(),
                   scheduler, force, sets, command=_command_line(), reuse=not no_reuse,
                   max_elements=max_elements, timeout=timeout, max_nodes=max_nodes)
    _sweep_done(info, out)
    click.echo(_graded(Path(out) / "errors.csv"))


def _graded(errors) -> str:
    """One line of a comparison's grades from its ``errors.csv``: the points within
    tolerance, the predicted ones (not used by a fit) apart."""
    import csv
    counts = {}
    with open(errors, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["ok"] in ("true", "false"):
                key = (row["status"] == "fitted", row["ok"] == "true")
                counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    ok = counts.get((False, True), 0) + counts.get((True, True), 0)
    predicted = counts.get((False, True), 0) + counts.get((False, False), 0)
    return (f"{ok} of {total} points within tolerance; predicted (no fit used them) "
            f"{counts.get((False, True), 0)} of {predicted}: each point in {errors}")


@cli.command("fixes")
@click.option("--measured", "measured", default=None, metavar="DIR",
              type=PathOf(file_okay=False),
              help="directory of NAME/ subdirectories measured with sim measure --patch NAME  "
                   "[default: experiments/measured/linux-x86_64/patched]")
@click.option("--profile", default="linux-x86_64", show_default=True,
              help="profile name in models/ or a path to a .toml (the machine measured)")
@click.option("--results", default="results/fixes", show_default=True,
              type=PathOf(file_okay=False), help="where each fix's comparison goes")
@click.option("--out", default="docs/fixes.md", show_default=True, type=PathOf(dir_okay=False),
              help="the markdown page")
@click.option("--figures", is_flag=True,
              help="also draw each comparison's figures and report (minutes per fix)")
@click.option("--also-profile", "also", multiple=True, metavar="PROFILE",
              help="grade the same measurements with this profile too (e.g. the measured "
                   "host's own, made by sim host-profile): its totals and verdicts beside "
                   "--profile's (repeatable)")
@click.option("--from-results", "from_results", is_flag=True,
              help="simulate nothing: write the page and the fixes' figures from the "
                   "comparisons an earlier sim fixes left in --results (the page names the "
                   "command without this flag)")
@_jobs_option
def fixes_cmd(measured, profile, results, out, jobs, figures, also, from_results):
    """Grade every fix measured on patched burn against its policy's predictions.

    For each NAME/ under --measured: sim compare --measured NAME/ -p NAME; then one page
    (--out) with the points within tolerance per fix and experiment, the hosts and the
    largest misses, and a figure per fix (fixes/NAME.png beside --out).
    """
    from ..analysis.fixes import PATCHED_MEASURED
    from .fixes import fixes_report
    from .sweep import default_jobs
    _check_out_file(out)
    grades = fixes_report(measured or PATCHED_MEASURED, profile, results, out,
                          jobs or default_jobs(), echo=lambda line: click.echo(line, err=True),
                          command=" ".join(w for w in _command_line().split(" ")
                                           if w != "--from-results"),
                          figures=figures, also=also, from_results=from_results)
    for name, g in grades.items():
        ok, n = g["total"]
        click.echo(f"{name}: {ok} of {n} points within tolerance")
    click.echo(f"-> {out}")


@cli.command("equivalence")
@click.option("--workload", "-w", "workloads", multiple=True, default=("all",), show_default=True,
              help="workload name; repeatable, or 'all' (every built-in workload)")
@_policy_option(multiple=True)
@click.option("--profile", "profiles", multiple=True,
              default=("m2max-macos", "linux-x86_64"), show_default=True,
              help="profile name in models/ or a path to a .toml; repeatable, or 'all'")
@click.option("--out", type=PathOf(dir_okay=False), default=None,
              help="also write every cell's comparison here (CSV)")
@click.option("--timeout", type=Above(0), default=120.0,
              show_default=True,
              help="seconds of wall time per run; a cell whose run takes longer is "
                   "too-slow, not compared")
@click.option("--resume", is_flag=True,
              help="with --out: keep the cells an earlier, stopped run wrote to "
                   "OUT.partial and check only the others")
@_jobs_option
def equivalence_cmd(workloads, policy, profiles, out, timeout, resume, jobs):
    """Check that fast-forward gives exact mode's rows, byte for byte, on every workload x
    variant x policy x profile (each workload at its quick parameters).

    Every cell runs twice, once in exact mode: an hour for the whole grid on 2 cores.
    Prints each cell that differs as it is found, then a count per result; exits 1 if any
    cell differs. With --out, each finished cell is also appended to OUT.partial, so a
    stopped run keeps what it found (OUT itself is only written at the end) and
    --resume goes on from there.
    """
    from ..analysis.data import atomic_write, format_value, rows_to_csv
    from .equivalence import COLUMNS, PartialResults, cell_key, cells, check
    from ..engine.profile import load_profile, profile_names
    from .progress import Progress
    from .sweep import default_jobs, select_policies
    from ..engine.workloads import builtin_names, load_workload
    if out is not None:
        _check_out_file(out)
    elif resume:
        raise click.UsageError("--resume needs --out (the run to go on with is OUT.partial)")
    names = []
    for name in workloads:
        for one in (builtin_names() if name == "all" else [name]):
            if one not in names:
                load_workload(one)          # an unknown name is an error before any cell
                names.append(one)
    chosen = []
    for name in profiles:
        for one in (profile_names() if name == "all" else [name]):
            if one not in chosen:
                load_profile(one)
                chosen.append(one)
    every = cells(names, select_policies(policy), chosen)
    partial = None if out is None else PartialResults(out)
    kept = partial.start(every, resume) if partial is not None else {}
    todo = [cell for cell in every if cell_key(cell) not in kept]
    if kept:
        click.echo(f"{len(kept)} cells kept from {partial.path}, {len(todo)} to check",
                   err=True)
    progress = Progress(len(todo))

    def found(row):
        if partial is not None:
            partial.add(row)
        if row["result"] in ("differs", "refused-differently"):
            click.echo(f"{row['workload']} {row['variant']} -p {row['policy']} "
                       f"--profile {row['profile']}: {row['result']}: {row['difference']}")
    try:
        checked = check(todo, jobs or default_jobs(), progress, timeout, found)
    except BaseException:
        progress.close()
        if partial is not None and partial.count:
            click.echo(f"{partial.count} cells written to {partial.path}; "
                       f"sim equivalence ... --out {out} --resume goes on", err=True)
        raise
    progress.close()
    by_key = dict(kept)
    by_key.update((cell_key(cell), row) for cell, row in zip(todo, checked))
    results = [by_key[cell_key(cell)] for cell in every]
    counts = {}
    for row in results:
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    exact = sum(r["exact_cpu_s"] for r in results)
    fast = sum(r["ff_cpu_s"] for r in results)
    click.echo(f"{len(results)} cells: " + ", ".join(f"{counts[k]} {k}" for k in
                                                   ("same", "refused", "too-slow", "differs",
                                                    "refused-differently") if k in counts)
               + f" (CPU: exact {exact:.1f} s, fast-forward {fast:.1f} s)")
    if out is not None:
        atomic_write(out, rows_to_csv(results, COLUMNS, format_value))
        partial.remove()
        click.echo(f"-> {out}")
    if counts.get("differs") or counts.get("refused-differently"):
        sys.exit(1)


@cli.command("plot")
@click.argument("results_dir", type=PathOf(file_okay=False))
@_jobs_option
def plot_cmd(results_dir, jobs):
    """Redraw the figures and the report of RESULTS_DIR from its CSVs (no simulation)."""
    from ..output.results import load, publish
    from .sweep import default_jobs
    _, _, info = load(results_dir)
    info.pop("incomplete", None)    # written by earlier versions for an interrupted run
    publish(results_dir, info, info.get("figures", []), jobs=jobs or default_jobs())
    click.echo(_figures(info, results_dir))


def _command_line() -> str:
    import shlex
    return "sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])


if __name__ == "__main__":
    main()
