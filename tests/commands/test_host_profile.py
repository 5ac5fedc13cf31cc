"""A profile knows its host: host facts read from a fake /sys and /proc (sim.platform.host), the
[host] table of a profile, the one warning line when a Linux profile's host is not the
running one, and the profile text `sim host-profile` writes (no cargo, no probe run)."""

import json
import tomllib

import pytest

import sim.platform.host
from sim import paths
from sim.platform.host import (describe, differences, mismatch_warning, parse_cpuinfo, parse_size,
                      read_caches, read_host, read_sysfs_shape)
from sim.commands.host_profile import gemm_blocking, host_text
from sim.engine.profile import MODELS_DIR, ProfileError, load_profile, validate

from clirun import run_cli

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
cache size\t: 1024 KB

processor\t: 1
model name\t: Other CPU
"""

#: the AMD EPYC (Zen 4) KVM guest's cpu0/cache: index -> (level, type, size, ways, line)
AMD_CACHES = {"index0": (1, "Data", "32K", 8, 64), "index1": (1, "Instruction", "32K", 8, 64),
              "index2": (2, "Unified", "1024K", 8, 64), "index3": (3, "Unified", "32768K", 16, 64)}

AMD = {"cpu_model": "AMD EPYC", "cores": 2, "page_bytes": 4096, "glibc": "2.36",
       "l1d_bytes": 32768, "l1d_ways": 8, "l2_bytes": 1 << 20, "l2_ways": 8,
       "l3_bytes": 32 << 20, "l3_ways": 16, "line_bytes": 64}


def fake_sys(root, caches=AMD_CACHES, cpuinfo=CPUINFO):
    cpu = root / "sys" / "cpu"
    for name, (level, kind, size, ways, line) in caches.items():
        d = cpu / "cpu0" / "cache" / name
        d.mkdir(parents=True)
        for file, value in (("level", level), ("type", kind), ("size", size),
                            ("ways_of_associativity", ways), ("coherency_line_size", line)):
            (d / file).write_text(f"{value}\n")
    (cpu / "cpu1").mkdir()
    (root / "cpuinfo").write_text(cpuinfo)
    return cpu, root / "cpuinfo"


def test_parse_size_and_cpuinfo():
    assert parse_size("32K") == 32768
    assert parse_size("1024K\n") == 1 << 20
    assert parse_size("32768K") == 32 << 20
    assert parse_size("2M") == 2 << 20
    with pytest.raises(ValueError):
        parse_size("lots")
    info = parse_cpuinfo(CPUINFO)
    # the first processor's block only
    assert info == {"cpu family": "25", "model": "17", "model name": "AMD EPYC"}


def test_host_facts_from_a_fake_sys(tmp_path):
    cpu, cpuinfo = fake_sys(tmp_path)
    caches = read_caches(cpu / "cpu0" / "cache")
    assert [(c["level"], c["type"], c["size"]) for c in caches] == [
        (1, "Data", 32768), (1, "Instruction", 32768), (2, "Unified", 1 << 20),
        (3, "Unified", 32 << 20)]
    host = read_host(cpu, cpuinfo, page_bytes=4096, glibc="2.36", cores=2)
    assert host == AMD
    assert set(host) == set(sim.platform.host.HOST_KEYS)
    shape = read_sysfs_shape(cpu)
    assert sorted(shape["cache_entries"]) == ["index0", "index1", "index2", "index3"]
    assert shape["instruction_indexes"] == ["index1"]
    assert sorted(shape["index_files"]) == sorted(
        ["level", "type", "size", "ways_of_associativity", "coherency_line_size"])
    assert sorted(shape["cpu_entries"]) == ["cpu0", "cpu1"]


def test_a_host_without_l2_or_l3(tmp_path):
    no_l3 = {k: v for k, v in AMD_CACHES.items() if k != "index3"}
    cpu, cpuinfo = fake_sys(tmp_path / "a", no_l3, cpuinfo="")
    host = read_host(cpu, cpuinfo, page_bytes=16384, glibc="", cores=4)
    assert (host["l3_bytes"], host["l3_ways"], host["page_bytes"]) == (0, 0, 16384)
    assert host["cpu_model"]            # something, even without a model name
    no_l2 = {k: v for k, v in AMD_CACHES.items() if k in ("index0", "index1")}
    cpu, cpuinfo = fake_sys(tmp_path / "b", no_l2)
    with pytest.raises(ValueError, match="no level-2 cache"):
        read_host(cpu, cpuinfo, page_bytes=4096, glibc="2.36", cores=2)


def test_gemm_blocking_of_both_hosts():
    xeon = load_profile("linux-x86_64")
    # the Xeon's [host] gives the profile's own kc/mc (read from gemm's source by hand)
    assert gemm_blocking(xeon.host) == (xeon.backends["flex"]["gemm_kc_max"],
                                         xeon.backends["flex"]["gemm_mc_max"]) == (1024, 128)
    assert gemm_blocking(AMD) == (512, 128)


def test_the_linux_profile_records_its_host():
    profile = load_profile("linux-x86_64")
    assert profile.host["l2_bytes"] == profile.process.l2_bytes == 2 << 20
    assert profile.host["l2_bytes"] == profile.backends["flex"]["matmul_workspace_bytes"]
    assert profile.host["cpu_model"].startswith("Intel(R) Xeon(R)")
    # the default profile says which machine it describes: the seeds' Mac, its caches the
    # ones its [process] models
    m2max = load_profile("m2max-macos")
    assert m2max.host["cpu_model"] == "Apple M2 Max" and m2max.host["glibc"] == ""
    assert [m2max.host[k] for k in ("l1d_bytes", "l2_bytes", "l3_bytes")] == [
        m2max.process.l1d_bytes, m2max.process.l2_bytes, m2max.process.l3_bytes]
    assert describe(m2max.host) == "Apple M2 Max, L2 16 MiB, 12 cores"


def test_a_host_table_is_validated(tmp_path):
    data = tomllib.loads((MODELS_DIR / "linux-x86_64.toml").read_text())
    data["host"]["l2_bytes"] = "1 MiB"
    with pytest.raises(ProfileError, match="host.l2_bytes must be a number"):
        validate(data, "p.toml")
    data = tomllib.loads((MODELS_DIR / "linux-x86_64.toml").read_text())
    del data["host"]["glibc"]
    with pytest.raises(ProfileError, match="missing key host.glibc"):
        validate(data, "p.toml")
    data = tomllib.loads((MODELS_DIR / "linux-x86_64.toml").read_text())
    data["host"]["bogomips"] = 5192
    with pytest.raises(ProfileError, match="unknown key host.bogomips"):
        validate(data, "p.toml")


def test_differences_name_what_matters_l2_first():
    xeon = load_profile("linux-x86_64").host
    diffs = differences(xeon, AMD)
    assert [d[0] for d in diffs] == ["L2", "CPU", "L1d"]
    assert diffs[0] == ("L2", "2 MiB", "1 MiB")
    assert differences(xeon, dict(xeon, cores=64, l3_bytes=0)) == []   # not what matters
    assert differences(AMD, {"l2_bytes": 1 << 20}) == []   # a fact one side lacks


def test_mismatch_warning_is_one_line_naming_l2_and_cpu():
    profile = load_profile("linux-x86_64")
    line = mismatch_warning(profile, AMD)
    assert line.startswith("sim: warning: profile linux-x86_64 describes another host")
    assert "\n" not in line
    assert "L2 2 MiB in the profile, 1 MiB here" in line
    assert "'AMD EPYC' here" in line and "sim host-profile" in line
    assert mismatch_warning(profile, dict(profile.host)) is None     # the same host
    assert mismatch_warning(profile, None) is None                    # host unknown
    assert mismatch_warning(load_profile("m2max-macos"), AMD) is None  # no [host]


def test_run_warns_once_on_another_host_and_not_on_its_own(capsys, monkeypatch):
    args = ["run", "adleak-rss", "--variant", "flex", "--set", "iterations=10",
            "--profile", "linux-x86_64", "--format", "csv"]
    monkeypatch.setattr(sim.platform.host, "_RUNNING", [AMD])
    code, out, err = run_cli(args, capsys)
    assert code == 0
    assert len(err) == 1 and err[0].startswith("sim: warning: profile linux-x86_64"), err
    monkeypatch.setattr(sim.platform.host, "_RUNNING", [dict(load_profile("linux-x86_64").host)])
    code, out2, err = run_cli(args, capsys)
    assert code == 0 and err == [] and out2 == out


def test_compare_reports_both_hosts(tmp_path, capsys, monkeypatch):
    measured = tmp_path / "m"
    measured.mkdir()
    (measured / "adleak-rss.csv").write_text(
        "experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
        "adleak-rss,flex,,0,k_iterations,rss,3.9,MB,\n")
    (measured / "measure-info.json").write_text(json.dumps({"machine": {"host": AMD}}))
    monkeypatch.setattr(sim.platform.host, "_RUNNING", [AMD])
    code, _, err = run_cli(["compare", "--measured", str(measured), "--profile",
                            "linux-x86_64", "--out", str(tmp_path / "out"), "-j", "1"],
                           capsys)
    assert code == 0, err
    assert sum(line.startswith("sim: warning: profile linux-x86_64") for line in err) == 1
    report = (tmp_path / "out" / "report.md").read_text()
    assert ("Host of the profile: Intel(R) Xeon(R) Processor, L2 2 MiB, 2 cores, glibc 2.36 "
            "(linux-x86_64). Host of the measurements: AMD EPYC, L2 1 MiB, 2 cores, "
            "glibc 2.36") in report


@pytest.mark.parametrize("kind", ["linux-x86_64", "macos-aarch64"])
def test_the_terminal_and_the_report_say_whose_machine_the_predictions_are(
        tmp_path, capsys, monkeypatch, kind):
    """The default profile (the seeds' Mac) on a Linux host: the last line of `sim compare`
    / `sim sweep` and the report say the predictions are the M2 Max's and name `sim
    host-profile`; on a Mac, one line naming the machine, and no such sentence."""
    measured = tmp_path / "m.csv"
    measured.write_text("experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
                        "adleak-rss,flex,,0,k_iterations,rss,2.2,MB,\n")
    monkeypatch.setattr("sim.commands.sweep.host_kind", lambda: kind)
    code, out, err = run_cli(["compare", "--measured", str(measured), "--out",
                              str(tmp_path / "out"), "-j", "1"], capsys)
    assert code == 0, err
    lines = out.splitlines()             # ..., wall time, whose machine, the grades
    assert lines[-3].startswith("wall time ") and "points within tolerance" in lines[-1]
    said = lines[-2]
    report = (tmp_path / "out" / "report.md").read_text()
    assert ("Host of the profile: Apple M2 Max, L2 16 MiB, 12 cores (macos-aarch64)."
            in report)
    if kind == "linux-x86_64":
        assert said == ("profile m2max-macos describes Apple M2 Max, L2 16 MiB, 12 cores "
                        "(macos-aarch64), not this linux-x86_64 host: its times and memory "
                        "are that machine's; `sim host-profile --out models/NAME.toml` "
                        "makes a profile of this host")
        assert ("Run on a linux-x86_64 host, another kind than the profile's: every time and "
                "memory figure here is the profile's machine's; `sim host-profile --out "
                "models/NAME.toml` makes a profile of this host.") in report
    else:
        assert said == ("profile m2max-macos describes Apple M2 Max, L2 16 MiB, 12 cores "
                        "(macos-aarch64)")
        assert "Run on a" not in report


def test_host_text_puts_this_host_into_the_profile(tmp_path):
    base = (MODELS_DIR / "linux-x86_64.toml").read_text()
    shape = {"cpu_entries": ["cpu0", "cpu1"], "cache_entries": ["index0", "index2", "index1"],
             "index_files": ["size", "type"], "instruction_indexes": ["index1"]}
    text = host_text(base, AMD, shape)
    data = tomllib.loads(text)
    validate(data, "new.toml")
    assert data["host"] == AMD
    assert data["process"]["l2_bytes"] == data["backend"]["flex"]["matmul_workspace_bytes"] \
        == 1 << 20
    assert data["process"]["l2_ways"] == 8
    assert (data["backend"]["flex"]["gemm_kc_max"], data["backend"]["flex"]["gemm_mc_max"]) \
        == (512, 128)
    assert data["sysfs"]["cache_entries"] == shape["cache_entries"]
    # every other value is the base's
    old = tomllib.loads(base)
    assert data["time"] == old["time"] and data["layout"] == old["layout"]
    # each value set says where it came from; the [host] keys too
    host_lines = text.split("[host]\n", 1)[1].split("\n[", 1)[0].splitlines()
    rest = text.split("\n[process]\n", 1)[1]
    for key in ("l2_bytes", "l2_ways", "matmul_workspace_bytes", "gemm_kc_max", "gemm_mc_max",
                "cache_entries"):
        line = next(line for line in rest.splitlines() if line.startswith(f"{key} ="))
        assert "# [measured] this host:" in line, line
    assert all("#" in line for line in host_lines if "=" in line)
    # a gemm costs the longer of its two terms, and says why
    assert data["backend"]["flex"]["gemm_overlap"] == 1.0 and old["backend"]["flex"][
        "gemm_overlap"] == 0.0
    line = next(line for line in rest.splitlines() if line.startswith("gemm_overlap ="))
    assert "# [derived]" in line
    # [host.sources] after [host]: every value written, with its source; still a profile
    from sim.commands.host_profile import FIT_PLAN, _with_sources, source_table
    stages = [list(FIT_PLAN[1])]
    rows = [{"experiment": "mechanism-cost", "variant": "page-fault", "phase": "first-touch",
             "x": 4096.0, "metric": "ns_per_op", "value": 1500.0}]
    table = source_table(AMD, shape, stages, rows, ["time.page_fault_ns"], {}, "m")
    sourced = tomllib.loads(_with_sources(text, table))
    validate(sourced, "new.toml")
    sources = sourced["host"]["sources"]
    assert sources["time.page_fault_ns"] == [
        "fitted", "mechanism-cost/page-fault/first-touch/4096/ns_per_op"]
    assert sources["process.l2_bytes"][0] == sources["time.sweep_tlb_read_ns"][0] == "measured"
    assert sources["time.tape_step_ns"][0] == sources["backend.flex.gemm_overlap"][0] \
        == "derived"
    assert sources["time.new_graph_ns"][0] == "base"
    assert {k: v for k, v in sourced["host"].items() if k != "sources"} == AMD
    # a base without [host] gets one after [meta]
    bare = base.replace(base[base.index("[host]"):base.index("[process]")], "")
    assert tomllib.loads(host_text(bare, AMD))["host"] == AMD


def test_host_profile_refuses_a_bad_out_before_any_work(tmp_path, capsys):
    existing = tmp_path / "mine.toml"
    existing.write_text("x = 1\n")
    code, _, err = run_cli(["host-profile", "--out", str(existing)], capsys)
    assert code == 2 and len(err) == 1 and "exists" in err[0] and "--force" in err[0]
    code, _, err = run_cli(["host-profile", "--out", str(tmp_path / "mine.txt")], capsys)
    assert code == 2 and len(err) == 1 and ".toml" in err[0]
    code, _, err = run_cli(["host-profile", "--out", str(tmp_path / "no" / "p.toml")], capsys)
    assert code == 2 and len(err) == 1 and "does not exist" in err[0]
    code, _, err = run_cli(["host-profile", "--out", str(tmp_path / "p.toml"), "--base",
                            "m2max-macos"], capsys)
    assert code == 2 and len(err) == 1 and "not a Linux profile" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


def test_a_measured_dir_mixing_quick_and_full_rows_is_refused_before_the_fit(tmp_path,
                                                                            capsys):
    """A named variant's CSV from a full run beside the quick run's mechanism-cost rows (as
    session 58's committed leak-replay CSV was): one error line at the fit's start, not
    after the fit (it came when the record was written, 36 minutes in), and no profile."""
    import shutil
    from sim.analysis.compare import known_checker, measured_files
    from sim.analysis.data import QUICK_NOTE, measured_quick, read_measured
    quick = paths.ROOT / "experiments" / "measured" / "amd-epyc-zen4-quick-s58"
    measured = tmp_path / "m"
    shutil.copytree(quick, measured)
    leak = measured / "mechanism-cost-leak-replay.csv"
    text = leak.read_text(encoding="utf-8")
    assert text.count(QUICK_NOTE) == 8 and text.count(",mechanism-cost --quick\n") == 8
    leak.write_text(text.replace(QUICK_NOTE, "").replace(",mechanism-cost --quick\n",
                                                         ",mechanism-cost\n"))
    # session 60's leak-fault rows, as a quick run beside it writes them (the dir predates it)
    fault = paths.ROOT / "experiments" / "measured" / "amd-epyc-zen4-leakfault-s60" / \
        "mechanism-cost.csv"
    (measured / "mechanism-cost-leak-fault.csv").write_text(
        fault.read_text(encoding="utf-8").replace(",mechanism-cost\n",
                                                  ",mechanism-cost --quick\n"))
    rows = []
    for path in measured_files([str(measured)]):
        rows += read_measured(path, known_checker())
    assert sum(not measured_quick(r) for r in rows) == 8
    code, _, err = run_cli(["host-profile", "--out", str(tmp_path / "p.toml"),
                            "--reuse-measured", "--measured-out", str(measured), "-j", "1"],
                           capsys)
    # its progress lines, then the one error line, before any stage was fitted
    assert code == 2 and err[-1].startswith("sim: error: "), err
    assert "mechanism-cost mix `sim measure --quick` runs and full ones" in err[-1]
    assert not any("[7/8]" in line for line in err)
    assert not (tmp_path / "p.toml").exists()


def test_a_linux_profile_under_another_name_predicts_the_same(tmp_path):
    # the probe workloads' sink (experiments/common.py) follows the profile's platform, not
    # its name: a profile sim host-profile names after its host keeps the probe's rows
    from sim.engine.runner import run_cell
    copy = tmp_path / "my-host.toml"
    copy.write_text((MODELS_DIR / "linux-x86_64.toml").read_text())
    quick = {"forwards": 10, "report_every": 5}

    def blocks(profile):
        rows = run_cell("pit-infer-flex", "C-valid-model-input-plain", "burn-0.22.1", profile,
                        quick, observables=False)
        return [(r["x"], r["value"]) for r in rows if r["metric"] == "heap_blocks_delta"]

    assert blocks(load_profile(str(copy))) == blocks(load_profile("linux-x86_64")) \
        == [(5, 0), (10, 3)]


#: mechanism-cost leak-fault's points the register stage is fitted on beside op-cost's
FAULT_POINTS = ("mechanism-cost/leak-fault/tracked-mul_scalar-reused/1000/ns_per_op",
                "mechanism-cost/leak-fault/untracked-add-reused/1000/ns_per_op")
#: mechanism-cost leak-replay's points the heap_page_write_ns stage is fitted on
LEAK_POINTS = ("mechanism-cost/leak-replay/untracked-add-beyond-faults/2000/ns_per_op",
               "mechanism-cost/leak-replay/tracked-mul_scalar-beyond-faults/2000/ns_per_op")


def test_heap_page_write_ns_is_fitted_on_leak_replay_before_the_register_stage():
    """Its own stage, on leak-replay's two beyond-faults rows (the points sim calibrate fitted
    amd-epyc-zen4's 550 ns on), after clock_read_ns and before register_ns: the tracked
    and untracked ops' leak is charged when register_ns is fitted."""
    from sim.analysis.compare import known_checker
    from sim.analysis.data import read_measured
    from sim.commands.host_profile import FIT_PLAN, plan_stages
    names = [[p for p, _ in stage] for stage in FIT_PLAN]
    leak = names.index(["time.heap_page_write_ns"])
    assert FIT_PLAN[leak] == (("time.heap_page_write_ns", list(LEAK_POINTS)),)
    assert names.index(["time.clock_read_ns"]) < leak
    assert leak < next(i for i, n in enumerate(names) if "time.register_ns" in n)
    assert list(LEAK_POINTS) == tomllib.loads((MODELS_DIR / "amd-epyc-zen4.toml").read_text(
        encoding="utf-8"))["calibration"]["fitted_on"]["time.heap_page_write_ns"]
    # the committed leak-replay run (session 58) has both points: the stage alone
    rows = read_measured(paths.ROOT / "experiments" / "measured" / "amd-epyc-zen4-leak-s58" /
                         "mechanism-cost.csv", known_checker())
    stages, _ = plan_stages(rows)
    assert stages == [[("time.heap_page_write_ns", list(LEAK_POINTS))]]


#: mechanism-cost report-wake's point the report_wake_ns stage is fitted on
WAKE_POINT = "mechanism-cost/report-wake/report-minus-bare/5/ns_per_op"


def test_report_wake_ns_is_fitted_on_report_wake_after_the_clock_read():
    """Its own stage, on report-wake's report-minus-bare row (a window after a report less one
    after nothing: the clock read cancels), after clock_read_ns and before op-cost's stages
    and the register stage."""
    from sim.analysis.compare import known_checker
    from sim.analysis.data import read_measured
    from sim.commands.host_profile import FIT_PLAN, plan_stages
    names = [[p for p, _ in stage] for stage in FIT_PLAN]
    wake = names.index(["time.report_wake_ns"])
    assert FIT_PLAN[wake] == (("time.report_wake_ns", [WAKE_POINT]),)
    assert names.index(["time.clock_read_ns"]) < wake
    assert wake < next(i for i, n in enumerate(names) if "backend.flex.op_overhead_ns" in n)
    # the committed report-wake runs (sessions 58 and 59) have the point: the stage alone
    for run in ("amd-epyc-zen4-window-s58/wake-1.csv", "amd-epyc-zen4-wake-s59/wake-2.csv",
                "amd-epyc-zen4-quick-s58/mechanism-cost-report-wake.csv"):
        rows = read_measured(paths.ROOT / "experiments" / "measured" / run, known_checker())
        stages, _ = plan_stages(rows)
        assert stages == [[("time.report_wake_ns", [WAKE_POINT])]], run


#: mechanism-cost gen-window's point the lift_ns stage is fitted on
LIFT_POINT = "mechanism-cost/gen-window/lift/lift/40/ns_per_op"


def test_lift_ns_is_fitted_on_gen_window_s_lift_before_op_cost():
    """Its own stage, on gen-window's lift/lift row (a matmul with a plain weight on an
    autodiff input less the same with the weight on autodiff, the handles' clones made
    equal: one lift), after clock_read_ns and report_wake_ns and before op-cost's stages."""
    from sim.analysis.compare import known_checker
    from sim.analysis.data import read_measured
    from sim.commands.host_profile import FIT_PLAN, plan_stages
    names = [[p for p, _ in stage] for stage in FIT_PLAN]
    lift = names.index(["time.lift_ns"])
    assert FIT_PLAN[lift] == (("time.lift_ns", [LIFT_POINT]),)
    assert names.index(["time.report_wake_ns"]) < lift
    assert lift < next(i for i, n in enumerate(names) if "backend.flex.op_overhead_ns" in n)
    # the committed gen-window runs (session 60) have the point: the stage alone
    for k in (1, 2, 3):
        rows = read_measured(paths.ROOT / "experiments" / "measured" / "amd-epyc-zen4-gen-s60" /
                             f"gen-{k}.csv", known_checker())
        stages, _ = plan_stages(rows)
        assert stages == [[("time.lift_ns", [LIFT_POINT])]], k


@pytest.mark.parametrize("variant", ["leak-replay", "report-wake", "gen-window",
                                     "leak-fault"])
def test_measure_named_runs_the_variant_and_writes_its_rows_or_nothing(tmp_path, monkeypatch,
                                                                       variant):
    """leak-replay, report-wake, gen-window and leak-fault are not among `sim measure
    --quick`'s variants (the probe runs them only when named): host-profile runs each into its own CSV beside the quick
    probes' (marked quick, on the clock asked for), or writes nothing and keeps the base's
    value of its parameter where the build does not have it."""
    from sim.commands import measure
    from sim.commands.host_profile import (FAULT_FILE, GEN_FILE, LEAK_FILE, NAMED_VARIANTS,
                                           WAKE_FILE, measure_named)
    assert NAMED_VARIANTS == {
        "leak-replay": (LEAK_FILE, "beyond-faults", "heap_page_write_ns"),
        "report-wake": (WAKE_FILE, "report-minus-bare", "report_wake_ns"),
        "gen-window": (GEN_FILE, "lift/lift", "lift_ns"),
        "leak-fault": (FAULT_FILE, "reused", "register_ns")}
    name, marker, param = NAMED_VARIANTS[variant]
    binary = tmp_path / "burn-probes"
    monkeypatch.setattr(measure, "binary_path", lambda gpu=False: binary)
    said = []
    # a probe that writes its arguments and clock as a row of the variant's to --out
    binary.write_text("#!/bin/sh\nfor a; do out=$a; done\n"
                      f"echo \"{marker} $* cpu=$PROBE_CPU_TIME\" > \"$out\"\n")
    binary.chmod(0o755)
    assert measure_named(tmp_path / "m", variant, cpu_time=True, echo=said.append)
    text = (tmp_path / "m" / name).read_text()
    # marked quick, as the quick run's mechanism-cost rows it is read with (a workload's rows
    # may not mix quick and full runs)
    assert f"mechanism-cost --quick --variant {variant} --out" in text and "cpu=1" in text
    assert said[-1].endswith(f"mechanism-cost {variant} -> {tmp_path / 'm' / name}")
    binary.write_text(f"#!/bin/sh\necho 'unknown variant {variant}' >&2\nexit 101\n")
    assert not measure_named(tmp_path / "none", variant, echo=said.append)
    assert not (tmp_path / "none").exists()
    assert said[-1].endswith(f"exit 101: unknown variant {variant}): {param} fitted without its "
                             f"rows (the base's value where it has no others)")


def test_the_fit_plan_on_a_run_with_some_probes_only():
    from sim.analysis.compare import known_checker
    from sim.analysis.data import read_measured
    from sim.commands.host_profile import FIT_PLAN, _largest_change, fit_points, plan_stages
    quick = paths.ROOT / "experiments" / "measured" / \
        "amd-epyc-zen4-quick"
    rows = read_measured(quick / "op-cost.csv", known_checker())
    stages, skipped = plan_stages(rows)
    # op-cost's four stages: the chain and plain Flex's small ops, the sum, the
    # matrix-vector gemm's call, the tracked ops
    assert [[p for p, _ in stage] for stage in stages] \
        == [[p for p, _ in FIT_PLAN[i]] for i in (9, 10, 13, 15)]
    assert "time.sweep_free_ns" in skipped and "backend.flex.gflops" in skipped
    assert "time.page_fault_ns" in skipped
    # every selector of the plan names a point of a full quick run (one with the text-fault row)
    every = []
    for name in ("adleak-rss", "op-cost", "backward-cost", "params", "p10-ema", "mechanism-cost"):
        every += read_measured(quick.with_name("amd-epyc-zen4-quick-core1") / f"{name}.csv",
                               known_checker())
    stages, skipped = plan_stages(every)
    used = [q for stage in stages for _, pts in stage for q in pts]
    # (the core-1 run predates the read-scalar and train-step variants of session 53)
    # (nor session 55's rehash, nor session 56's mlp-sample, nor session 58's clock-read
    # and leak-replay, nor session 59's report-wake, nor session 60's gen-window and
    # leak-fault)
    newer = {"mechanism-cost/clock-read/window/1/ns_per_op", *LEAK_POINTS, WAKE_POINT,
             LIFT_POINT, *FAULT_POINTS,
             "mechanism-cost/read-scalar/read-minus-drop/250/ns_per_op",
             "mechanism-cost/read-scalar/autodiff-read-minus-drop/250/ns_per_op",
             "mechanism-cost/train-step/d4/4/ms_per_step",
             "mechanism-cost/rehash/all/256/ns_per_op", "mechanism-cost/rehash/all/2048/ns_per_op",
             "mechanism-cost/mlp-sample/module-minus-ops/250/ns_per_op"}
    assert newer <= set(fit_points())
    assert set(used) == set(fit_points()) - newer - {
        "adleak-count-params/chain-dead/size=16/after-unrelated-backward/300/backward_ms"}
    assert list(skipped) == ["time.rehash_item_ns", "time.linear_call_ns",
                             "time.clock_read_ns", "time.report_wake_ns", "time.lift_ns",
                             "time.heap_page_write_ns",
                             "backend.flex.read_scalar_ns",
                             "time.optimizer_map_ns", "time.root_check_node_ns"]
    # session 53's quick run has every point of the plan but chain-dead's, rehash's,
    # mlp-sample's and the later named variants' (clock-read, leak-replay, report-wake,
    # leak-fault)
    every = []
    for name in ("adleak-rss", "op-cost", "backward-cost", "params", "p10-ema", "mechanism-cost"):
        every += read_measured(quick.with_name("amd-epyc-zen4-quick-s53") / f"{name}.csv",
                               known_checker())
    stages, skipped = plan_stages(every)
    assert set(q for stage in stages for _, pts in stage for q in pts) == set(fit_points()) - {
        "adleak-count-params/chain-dead/size=16/after-unrelated-backward/300/backward_ms",
        "mechanism-cost/rehash/all/256/ns_per_op", "mechanism-cost/rehash/all/2048/ns_per_op",
        "mechanism-cost/mlp-sample/module-minus-ops/250/ns_per_op",
        "mechanism-cost/clock-read/window/1/ns_per_op", *LEAK_POINTS, WAKE_POINT, LIFT_POINT,
        *FAULT_POINTS}
    assert list(skipped) == ["time.rehash_item_ns", "time.linear_call_ns",
                             "time.clock_read_ns", "time.report_wake_ns", "time.lift_ns",
                             "time.heap_page_write_ns",
                             "time.root_check_node_ns"]
    # the passes stop when no parameter moved more than SETTLED in the last one
    assert _largest_change(["a", "b"], {"a": 100.0, "b": 10.0}.get,
                           {"a": 101.0, "b": 5.0}.get) == ("b", 0.5)
    assert _largest_change([], {}.get, {}.get) == ("nothing", 0.0)


def test_a_miss_is_not_fitted_faster_than_a_hit(tmp_path, monkeypatch):
    """A stage whose fit asks for gbps_miss above gbps writes gbps_miss = gbps (a miss costs
    what a hit does), says so, and is refitted in the next pass (no stale predictions)."""
    import sim.commands.calibrate as calibrate_mod
    from sim.commands.calibrate import _with
    from sim.commands.host_profile import UPPER_BOUNDS, _fit_stage
    base = load_profile("amd-epyc-zen4")
    gbps = base.get("backend.flex.gbps")

    def fake_calibrate(rows, profile, params, selectors, **kw):
        new = _with(profile, {"backend.flex.gbps_miss": 2 * gbps})
        new.data["calibration"] = {"fitted": list(params), "points": []}
        return new, [{"point": "p", "predicted": 1.0, "measured": 1.0}]

    monkeypatch.setattr(calibrate_mod, "calibrate", fake_calibrate)
    monkeypatch.setattr(calibrate_mod, "select_points", lambda rows, selectors: rows)
    said = []
    stage = (("backend.flex.gbps_miss", ["p10-ema/ema-only//100/ms_per_step"]),)
    out, predicted = _fit_stage([], base.path, stage, tmp_path / "s.toml", fresh=True, jobs=1,
                                sink=None, echo=said.append, sources=[])
    assert "backend.flex.gbps_miss" in UPPER_BOUNDS
    assert load_profile(str(out)).get("backend.flex.gbps_miss") == pytest.approx(gbps)
    assert predicted is None
    assert len(said) == 1 and said[0].lstrip().startswith("bounded: backend.flex.gbps_miss")


def test_the_seeds_name_the_host_their_write_ups_give():
    """The seeds' measure-info.json records what their write-ups say of the machine (an M2
    Max on macOS 27) and nothing they do not (no cores, no L2): the report states it."""
    from sim.commands.sweep import DEFAULT_MEASURED, _hosts
    hosts = _hosts(load_profile("m2max-macos"), [DEFAULT_MEASURED])
    assert hosts["measured"] == {str(DEFAULT_MEASURED): "Apple M2 Max, macOS 27"}


def test_a_users_csv_without_its_host_says_how_to_record_it(tmp_path):
    from sim.commands.sweep import _hosts
    from sim.output.report import _hosts_line
    csv = tmp_path / "my.csv"
    csv.write_text("experiment,variant,phase,x,x_unit,metric,value,unit,note\n")
    profile = load_profile("m2max-macos")
    line = _hosts_line(_hosts(profile, [csv]))
    assert "Host of the measurements: not recorded" in line and "measure-info.json" in line
    (tmp_path / "measure-info.json").write_text(
        json.dumps({"machine": {"host": {"cpu_model": "Apple M3", "os": "macOS 26"}}}))
    line = _hosts_line(_hosts(profile, [csv]))
    assert "Host of the measurements: Apple M3, macOS 26 (" in line
    assert "measure-info.json" not in line


def test_the_report_names_a_measured_folder_it_can_be_found_by(tmp_path, monkeypatch):
    """From another directory the seeds' folder showed as `measured/`, a user's outside the
    working directory as its bare name: the checkout's path, or the whole one."""
    from sim.commands.sweep import DEFAULT_MEASURED
    from sim.output.report import _shown
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert _shown(DEFAULT_MEASURED.parent) == "experiments/measured"
    assert _shown(tmp_path / "data" / "my.csv") == str((tmp_path / "data" / "my.csv").resolve())
    assert _shown(elsewhere / "my.csv") == "my.csv"
