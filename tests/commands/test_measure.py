"""`sim measure` and the Linux probe data, without building the probes (CI stays fast).

The probes (experiments/probes, Rust) take minutes to build; these tests check the
parser and schema on the committed sample and files, the command's error paths,
and that the Linux profile predicts the structural probe points exactly.
"""

import os
import subprocess
import sys

import pytest

from sim import paths
from sim.commands import measure
from sim.analysis.data import DataError, read_measured
from sim.errors import UserError

ROOT = paths.ROOT
LINUX = ROOT / "experiments" / "measured" / "linux-x86_64"
SAMPLE = LINUX / "diagnostics" / "sample.csv"


def test_sample_parses_with_probe_columns():
    rows = measure.parse_probe_csv(SAMPLE)
    assert len(rows) == 20
    for row in rows:
        assert row["platform"] == "linux-x86_64"
        assert row["burn_version"] == "0.22.1"
        assert row["probe"]
    by_key = {(r["experiment"], r["variant"], r["phase"], r["x"], r["metric"]): r for r in rows}
    untracked = by_key[("adleak-count-fresh", "flex.autodiff", "after-loop", 10000.0,
                        "heap_bytes_delta")]
    assert untracked["value"] == 11111872 and untracked["unit"] == "B"
    assert by_key[("adleak-rss", "flex.autodiff", "", 0.0, "rss_bytes")]["value"] == 3862528
    assert by_key[("p10-ema", "target", "", 3.0, "panic")]["value"] == 1
    # quoted notes (RFC 4180) survive, commas included
    note = by_key[("p10-ema", "detach", "", 50.0, "rss_growth_per_step")]["note"]
    assert note.startswith("(RSS now - RSS after step 1)/(steps - 1), KB")


def test_sample_rejects_an_unknown_metric(tmp_path):
    text = SAMPLE.read_text().splitlines()
    header, first = text[0], text[1]
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "\n" + first.replace(",rss,", ",rss_typo,") + "\n")
    with pytest.raises(DataError, match="unknown metric 'rss_typo'"):
        measure.parse_probe_csv(bad)


@pytest.mark.parametrize("name", ["adleak-rss", "adleak-count", "pit-infer", "p10-ema",
                                  "p10-ema-adam", "params", "sizeof", "alloc-trace",
                                  "train-validate", "op-cost", "backward-cost"])
def test_committed_probe_csvs_load_and_map_to_workloads(name):
    rows = measure.parse_probe_csv(LINUX / f"{name}.csv")
    assert rows
    assert all(r["platform"] == "linux-x86_64" for r in rows)


def test_trace_files_are_not_measured_points():
    # several events share one x: a trace, kept out of the measured files
    with pytest.raises(DataError):
        read_measured(LINUX / "sizeof-alloc.csv")


def _sim(args, env_path):
    env = dict(os.environ, PATH=env_path)
    return subprocess.run([sys.executable, "-m", "sim.commands.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_measure_without_cargo_fails_with_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = tmp_path / "out"
    result = _sim(["measure", "--quick", "--out", str(out)], str(empty))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sim: error: cargo not found on PATH")
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_measure_unknown_probe_fails_with_one_line(tmp_path):
    result = _sim(["measure", "--probe", "nope", "--out", str(tmp_path / "o")],
                  os.environ.get("PATH", ""))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "sim: error: --probe nope: unknown probe (valid: adleak-rss, adleak-count, pit-infer, "
        "p10-ema, p10-ema-adam, sizeof, alloc-trace, params, train-validate, op-cost, backward-cost, "
        "mechanism-cost, all)"]


def test_build_failure_messages_are_one_line():
    registry = measure._build_failure(101, [
        "    Updating crates.io index",
        "error: failed to get `burn` as a dependency of package `burn-probes v0.1.0`",
        "Caused by:", "  Couldn't resolve host name (Could not resolve host: index.crates.io)"])
    assert registry.startswith("cargo could not fetch the probes' crates from the registry")
    assert "\n" not in registry
    compile_error = measure._build_failure(101, ["   Compiling burn-probes v0.1.0",
                                                 "error[E0425]: cannot find value `x`"])
    assert compile_error == ("cargo build of the probes failed (exit 101): "
                             "error[E0425]: cannot find value `x`")


def test_select_probes():
    assert measure._select(None) == list(measure.PROBES)
    assert measure._select(["params", "sizeof", "params"]) == ["params", "sizeof"]
    with pytest.raises(UserError):
        measure._select(["bogus"])


def test_linux_profile_reproduces_the_structural_probe_points():
    """size_of rows and the fresh-process adleak-count: exact (no fitting involved)."""
    from sim.analysis.compare import join
    from sim.engine.runner import run_cell
    measured = [r for r in measure.parse_probe_csv(LINUX / "sizeof.csv")]
    predicted = []
    for variant in sorted({r["variant"] for r in measured}):
        predicted += run_cell("sizeof", variant, profile="linux-x86_64", observables=False)
    joined = [e for e in join(measured, predicted) if e["status"] != "unpredicted"]
    assert len(joined) == 15 and all(e["ok"] for e in joined)

    measured = [r for r in measure.parse_probe_csv(LINUX / "adleak-count.csv")
                if r["experiment"] == "adleak-count-fresh"]
    predicted = []
    for variant in ("flex", "flex.autodiff", "a-tracked"):
        predicted += run_cell("adleak-count-fresh", variant, profile="linux-x86_64",
                              observables=False)
    joined = join(measured, predicted)
    assert all(e["predicted"] == e["measured"] for e in joined), \
        [(e["point"], e["measured"], e["predicted"]) for e in joined if not e["ok"]]


FAKE_PROBE = """#!{python}
# a stand-in for burn-probes: one timing that varies by run, one count that does not
import sys
path = sys.argv[sys.argv.index("--out") + 1]
counter = {counter!r}
n = int(open(counter).read()) + 1 if __import__("os").path.exists(counter) else 1
open(counter, "w").write(str(n))
rows = ["experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe",
        f"adleak-count-params,tracked/size=16,after-unrelated-backward,1000,iterations,"
        f"backward_ms,{{n:.3f}},ms,,linux-x86_64,0.22.1,params",
        "adleak-count-params,tracked/size=16,after-loop,1000,iterations,heap_blocks_delta,"
        "5167,blocks,,linux-x86_64,0.22.1,params"]
if n == {odd} :
    rows.pop()
open(path, "w").write("\\n".join(rows) + "\\n")
"""


def _fake(tmp_path, odd=-1):
    binary = tmp_path / "burn-probes"
    binary.write_text(FAKE_PROBE.format(python=sys.executable, counter=str(tmp_path / "n"),
                                        odd=odd))
    binary.chmod(0o755)
    return binary


def test_repeat_merges_runs_into_means(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path, code, _ = measure._run_repeated(_fake(tmp_path), "params", False, out, 3,
                                          lambda *_: None)
    assert code == 0
    rows = {r["metric"]: r for r in read_measured(path)}
    assert rows["backward_ms"]["value"] == 2.0   # runs gave 1, 2, 3 ms
    assert rows["backward_ms"]["note"] == "mean of 3 fresh runs (1.000, 2.000, 3.000 ms)"
    assert rows["heap_blocks_delta"]["value"] == 5167 and rows["heap_blocks_delta"]["note"] == ""
    assert sorted(p.name for p in out.iterdir()) == ["params.csv"]   # scratch runs removed


def test_repeat_refuses_runs_with_other_rows(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UserError, match="params: run 2 gave other observations than run 1"):
        measure._run_repeated(_fake(tmp_path, odd=2), "params", False, out, 3, lambda *_: None)
    assert list(out.iterdir()) == []


def test_vulkan_missing_names_the_packages(tmp_path, monkeypatch):
    import ctypes.util
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert measure.vulkan_missing(icd_dirs=(str(tmp_path),)) == ["libvulkan1",
                                                                  "mesa-vulkan-drivers"]
    (tmp_path / "lvp_icd.x86_64.json").write_text("{}")
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libvulkan.so.1")
    assert measure.vulkan_missing(icd_dirs=(str(tmp_path),)) == []


def test_measure_gpu_without_vulkan_fails_before_building(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "vulkan_missing", lambda: ["mesa-vulkan-drivers"])
    monkeypatch.setattr(measure, "_cargo", lambda: "cargo")
    monkeypatch.setattr(measure, "build", lambda *a, **k: pytest.fail("built"))
    out = tmp_path / "out"
    with pytest.raises(UserError) as info:
        measure.measure(out=str(out), gpu=True)
    assert str(info.value) == ("no Vulkan device for the GPU probes: install "
                               "mesa-vulkan-drivers (apt-get install mesa-vulkan-drivers)")
    assert not out.exists()


def test_measure_gpu_probe_selection_and_quick():
    assert measure._select(None, measure.GPU_PROBES) == list(measure.GPU_PROBES)
    with pytest.raises(UserError, match="unknown probe"):
        measure._select(["p10-ema"], measure.GPU_PROBES)
    with pytest.raises(UserError, match="--quick does not apply to --gpu"):
        measure.measure(quick=True, out="unused", gpu=True)


GPU = LINUX / "gpu"


@pytest.mark.parametrize("name", ["adleak", "cleanup", "large-forward", "pit-infer",
                                  "train-step"])
def test_committed_gpu_csvs_load_and_map_to_workloads(name):
    rows = measure.parse_probe_csv(GPU / f"gpu-{name}.csv")
    assert rows and all("llvmpipe" in r["note"] for r in rows)


def test_linux_profile_predicts_the_lavapipe_pool_pages_and_cleaned_pools_exactly():
    """experiments/measured/linux-x86_64/gpu: every page count and page size, and after
    memory_cleanup (which also empties cubecl-wgpu's metadata uniforms, not modelled)
    every byte, as measured on lavapipe."""
    from sim.analysis.compare import join
    from sim.engine.runner import run_cell
    measured = [r for name in ("cleanup", "large-forward")
                for r in measure.parse_probe_csv(GPU / f"gpu-{name}.csv")]
    predicted = []
    for workload, variant in (("gpu-cleanup", "plain"),
                              ("gpu-large-forward", "mlp-2048-batch-1024")):
        predicted += run_cell(workload, variant, profile="linux-x86_64")
    joined = join(measured, predicted)
    pages = [e for e in joined if e["metric"].startswith(("gpu_pages", "gpu_page_bytes"))]
    cleaned = [e for e in joined if "cleanup" in e["phase"]]
    assert len(pages) == 5 * 10 and len(cleaned) == 13 * 4
    assert all(e["ok"] and e["predicted"] == e["measured"] for e in pages + cleaned)


def test_a_binary_leaves_the_page_cache_before_it_is_measured(tmp_path):
    """A freshly built binary is cached whole, and fault-around then maps more of its text
    than an old binary's runs do: `sim measure` drops its cached pages first (Linux), which
    leaves the file as it was; a missing file is no error."""
    binary = tmp_path / "burn-probes"
    binary.write_bytes(b"\x7fELF" + bytes(100_000))
    assert measure.evict_page_cache(binary) is hasattr(os, "posix_fadvise")
    assert binary.read_bytes() == b"\x7fELF" + bytes(100_000)
    assert measure.evict_page_cache(tmp_path / "missing") is False
