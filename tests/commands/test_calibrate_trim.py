"""`sim calibrate --heap-refault` writes what a trim of the glibc arena's top costs
(`time.trim_cycle_ns`, `time.trim_page_ns`) from mechanism-cost heap-refault's brk-per-trim
rows (a least-squares line over pages given back; no fit), names the files and the host in
the values' comments and in `[host.sources]`, and refuses bad input with one error line
before writing anything."""

import tomllib

import pytest

from clirun import assert_calibrated_again_same, assert_one_error, run_cli
from sim import paths
from sim.commands.calibrate import read_heap_refault
from sim.commands.host_profile import source_table
from sim.engine.profile import ProfileError, load_profile

ROOT = paths.ROOT
S56 = ROOT / "experiments" / "measured" / "amd-epyc-zen4-trim-s56"
HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe"


def _row(phase, pages, value):
    return (f"mechanism-cost,heap-refault,{phase},{pages},pages,ns_per_op,{value},ns,"
            f"\"a note, with a comma\",linux-x86_64,0.22.1,mechanism-cost")


def _dir(tmp_path, runs=((10_000.0, 20_000.0), (11_000.0, 21_000.0))):
    d = tmp_path / "trim"
    d.mkdir()
    for k, (at16, at64) in enumerate(runs, 1):
        (d / f"heap-refault-{k}.csv").write_text("\n".join([
            HEADER, _row("trimmed-touch", 16, 1100.0), _row("brk-per-trim", 16, at16),
            _row("trimmed-touch", 64, 1200.0), _row("brk-per-trim", 64, at64)]) + "\n")
    (d / "host.txt").write_text("Some CPU, L2 1 MiB\n")
    return d


def test_rows_give_the_fixed_cost_and_the_cost_per_page(tmp_path):
    trim = read_heap_refault(_dir(tmp_path))
    # means 10,500 at 16 pages and 20,500 at 64: slope 10,000 / 48, fixed 10,500 - 16 x that
    assert trim["page_ns"] == pytest.approx(10_000 / 48, abs=0.005)
    assert trim["cycle_ns"] == pytest.approx(10_500 - 16 * 10_000 / 48, abs=0.05)
    assert len(trim["points"]) == 4 and trim["host"] == "Some CPU, L2 1 MiB"


def test_the_committed_measurement_gives_the_profiles_values():
    trim = read_heap_refault(S56)
    assert len(trim["points"]) == 12          # six runs (three of session 55), two sizes
    assert sorted({p for p, _ in trim["points"]}) == [16.0, 64.0]
    data = tomllib.loads((ROOT / "models" / "amd-epyc-zen4.toml").read_text())
    assert data["time"]["trim_cycle_ns"] == trim["cycle_ns"] == 8032.4
    assert data["time"]["trim_page_ns"] == trim["page_ns"] == 193.27
    assert data["host"]["sources"]["time.trim_cycle_ns"][0] == "measured"
    # the profiles of hosts that never ran the probe charge no trim
    for name in ("linux-x86_64", "m2max-macos", "amd-epyc-zen4-long"):
        other = tomllib.loads((ROOT / "models" / f"{name}.toml").read_text())
        assert (other["time"]["trim_cycle_ns"], other["time"]["trim_page_ns"]) == (0.0, 0.0)


def test_calibrate_writes_both_values_and_their_sources(tmp_path, capsys):
    d = _dir(tmp_path)
    out = tmp_path / "zen4.toml"
    code, stdout, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4",
                                   "--heap-refault", str(d), "--out", str(out)], capsys)
    assert code == 0, lines
    assert "time.trim_page_ns" in stdout and "-> 208.33" in stdout
    text = out.read_text()
    data = tomllib.loads(text)
    base = tomllib.loads((ROOT / "models" / "amd-epyc-zen4.toml").read_text())
    assert data["time"]["trim_page_ns"] == 208.33
    assert data["time"]["trim_cycle_ns"] == 7166.7
    assert "on Some CPU, L2 1" in text
    source = data["host"]["sources"]["time.trim_page_ns"]
    assert source[0] == "measured" and "heap-refault-2.csv" in source[1]
    # every other value, and the calibration record, as the base has them
    for section in ("layout", "code", "calibration", "process"):
        assert data[section] == base[section]
    assert {k: v for k, v in data["time"].items() if not k.startswith("trim_")} == \
        {k: v for k, v in base["time"].items() if not k.startswith("trim_")}
    # again over its own output: the same file
    again = assert_calibrated_again_same(tmp_path, capsys, out, "--heap-refault", d)
    assert load_profile(again).get("time.trim_cycle_ns") == 7166.7


def test_without_out_nothing_is_written(tmp_path, capsys):
    code, stdout, _ = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--heap-refault",
                               str(_dir(tmp_path))], capsys)
    assert code == 0 and "not written" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trim"]


def test_bad_input_is_one_error(tmp_path, capsys):
    d = _dir(tmp_path)

    def refused(path, message, *extra):
        code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--heap-refault",
                                  str(path), *extra], capsys)
        assert_one_error(code, lines, message)

    refused(d, "without a fit", "--fit", "time.page_fault_ns")
    refused(d, "give one of them", "--tlb", str(d))
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(empty, "no CSV file there")
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "\n" + _row("brk-per-trim", 16, 1000.0) + "\n")
    refused(bad, "two page counts")
    for value in ("nan", "inf", "1e300", "-5", "x"):
        bad.write_text("\n".join([HEADER, _row("brk-per-trim", 16, 1000.0),
                                  _row("brk-per-trim", 64, value)]) + "\n")
        refused(bad, "bad.csv:3")
    for pages in ("1e200", "2e-200", "0.5", "nan", "0"):    # the line's sums overflowed or
        bad.write_text("\n".join([HEADER, _row("brk-per-trim", 1, 1000.0),  # divided by 0
                                  _row("brk-per-trim", pages, 2000.0)]) + "\n")
        refused(bad, "bad.csv:3")
    bad.write_bytes(b"experiment,variant\n\xff\xfe,1\n")
    refused(bad, "cannot read it as CSV")
    assert not (tmp_path / "out.toml").exists()


def test_host_profile_names_the_probe_or_says_trims_are_not_charged(tmp_path):
    table = source_table({}, None, [], [], [], {}, trim_dir="results/hp")
    assert table["time.trim_cycle_ns"][0] == "measured"
    assert "results/hp/trim" in table["time.trim_page_ns"][1]
    kept = source_table({}, None, [], [], [], {})["time.trim_cycle_ns"]
    assert kept[0] == "base" and "not charged" in kept[1]


def test_host_profile_step_reuses_the_rows_it_finds(tmp_path):
    from sim.commands.host_profile import _with_trim
    said = []
    out = _with_trim(ROOT / "models" / "linux-x86_64.toml", _dir(tmp_path), tmp_path / "p.toml",
                     True, False, said.append)
    assert load_profile(out).get("time.trim_page_ns") == 208.33
    assert any("reusing" in m for m in said)


def test_measure_trim_runs_the_probe_and_writes_its_rows_or_nothing(tmp_path, monkeypatch):
    from sim.commands import measure
    from sim.commands.host_profile import measure_trim
    from sim.errors import UserError

    binary = tmp_path / "burn-probes"
    monkeypatch.setattr(measure, "binary_path", lambda gpu=False: binary)
    said = []
    # a probe that writes its rows to --out (its last argument)
    binary.write_text("#!/bin/sh\nfor a; do out=$a; done\n"
                      f"printf '%s\\n' '{HEADER}' '{_row('brk-per-trim', 16, 9000.0)}' "
                      "> \"$out\"\n")
    binary.chmod(0o755)
    assert measure_trim(tmp_path / "trim", runs=2, echo=said.append)
    assert sorted(p.name for p in (tmp_path / "trim").iterdir()) == [
        "heap-refault-1.csv", "heap-refault-2.csv", "host.txt"]
    assert "brk-per-trim" in (tmp_path / "trim" / "heap-refault-2.csv").read_text()
    # a build without the variant: False, nothing written, the probe's last line said
    binary.write_text("#!/bin/sh\necho 'unknown variant heap-refault' >&2\nexit 3\n")
    assert not measure_trim(tmp_path / "none", echo=said.append)
    assert not (tmp_path / "none").exists()
    assert "exit 3: unknown variant heap-refault" in said[-1]
    binary.chmod(0o644)                       # there but not runnable: one error
    with pytest.raises(UserError, match="cannot run"):
        measure_trim(tmp_path / "none", echo=said.append)


def test_a_profile_without_a_glibc_arena_is_refused(tmp_path, capsys):
    """Nothing trims on macOS's allocator (nor glibc's size classes): trim costs written
    there would never be charged, so the command says so in one error and writes nothing,
    and a profile that carries them anyway does not load."""
    d = _dir(tmp_path)
    out = tmp_path / "mac.toml"
    code, _, lines = run_cli(["calibrate", "--profile", "m2max-macos", "--heap-refault",
                              str(d), "--out", str(out)], capsys)
    assert_one_error(code, lines, "m2max-macos's allocator is 'macos'", "no glibc arena",
                     "never be charged")
    assert not out.exists()
    text = (paths.MODELS / "m2max-macos.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("trim_cycle_ns = 0.0", "trim_cycle_ns = 8032.4"))
    with pytest.raises(ProfileError, match="time.trim_cycle_ns must be 0 or more, and 0 unless"):
        load_profile(str(bad))
