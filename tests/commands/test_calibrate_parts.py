"""`sim calibrate --process-parts` writes the process's start (`process.baseline_rss_bytes`) and
the text of the first single-row forward (`code.gemv_bytes`) from the train-validate probe's
PROBE_PARTS rows (no fit), names the file and the host in the values' comments and in
`[host.sources]`, and refuses bad input with one error line before writing anything."""

import tomllib

import pytest

from clirun import assert_calibrated_again_same, assert_one_error, run_cli
from sim import paths
from sim.analysis.parts import parse_part_lines, parts_csv, read_parts
from sim.commands.host_profile import source_table
from sim.engine.profile import load_profile
from sim.errors import UserError

ROOT = paths.ROOT
S55 = ROOT / "experiments" / "measured" / "amd-epyc-zen4-parts-s55"
S54 = ROOT / "experiments" / "measured" / "linux-x86_64" / "diagnostics" / \
    "train-validate-parts-s54.csv"


def _line(name, rss, text):
    return (f"PART {name:<12} rss {rss:>9.1f} d      0.0 text {text:>7.1f} d     0.0 live "
            f"0.0 brk 0.0 arena 132.0 inuse 1.0 free 1.0 top 1.0 mmap 0     0.0 KiB")


def _stderr(start, sgd_text, gen_text):
    return "\n".join([_line("start", start, 600.0), _line("1 sgd", 5900.0, sgd_text),
                      _line("gen 1", 5900.0, gen_text), _line("gen last", 6000.0, 3200.0),
                      "PART end RssAnon 700 KiB RssFile 5300 KiB"])


def _parts(tmp_path):
    processes = [("plain", parse_part_lines(_stderr(3000.0, 3000.0, 3000.0))),
                 ("plain", parse_part_lines(_stderr(3100.0, 3000.0, 3064.0))),
                 ("autodiff", parse_part_lines(_stderr(2900.0, 2900.0, 2900.0)))]
    d = tmp_path / "parts"
    d.mkdir()
    (d / "parts.csv").write_text(parts_csv(processes, "Some CPU, L2 1 MiB"))
    return d


def test_parts_give_the_start_and_the_single_row_forwards_text(tmp_path):
    parts = read_parts(_parts(tmp_path))
    assert parts["starts"] == [3000.0, 3100.0, 2900.0]
    assert parts["start_bytes"] == 3000 * 1024
    assert parts["gemvs"] == [0.0, 64.0, 0.0]
    assert parts["gemv_bytes"] == round(64 * 1024 / 3)
    assert parts["host"] == "Some CPU, L2 1 MiB"


def test_the_committed_measurement_gives_the_profiles_values():
    parts = read_parts(S55)
    assert len(parts["starts"]) == len(parts["gemvs"]) == 30
    assert (min(parts["starts"]), max(parts["starts"])) == (2812.0, 3156.0)
    assert sorted(set(parts["gemvs"])) == [0.0, 64.0, 128.0]
    data = tomllib.loads((ROOT / "models" / "amd-epyc-zen4.toml").read_text())
    assert data["process"]["baseline_rss_bytes"] == parts["start_bytes"] == 3074185
    assert data["code"]["gemv_bytes"] == parts["gemv_bytes"] == 19661
    assert data["host"]["sources"]["process.baseline_rss_bytes"][0] == "measured"
    # the Xeon's profile keeps its own fitted baseline, and no gemv text
    xeon = tomllib.loads((ROOT / "models" / "linux-x86_64.toml").read_text())
    assert (xeon["process"]["baseline_rss_bytes"], xeon["code"]["gemv_bytes"]) == (2879112, 0)


def test_a_window_with_more_than_the_forward_is_not_read_as_its_text():
    """Session 54's full quick runs have validation, steps and reports between step 1 and
    generation: their starts are read, the single-row forward's text is not."""
    with pytest.raises(UserError, match="follows '1 sgd'"):
        read_parts(S54)


def test_calibrate_writes_both_values_and_their_sources(tmp_path, capsys):
    d = _parts(tmp_path)
    out = tmp_path / "zen4.toml"
    code, stdout, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4",
                                   "--process-parts", str(d), "--out", str(out)], capsys)
    assert code == 0, lines
    assert "process.baseline_rss_bytes" in stdout and "-> 3072000" in stdout
    text = out.read_text()
    data = tomllib.loads(text)
    base = tomllib.loads((ROOT / "models" / "amd-epyc-zen4.toml").read_text())
    assert data["process"]["baseline_rss_bytes"] == 3072000
    assert data["code"]["gemv_bytes"] == round(64 * 1024 / 3)
    assert "Some CPU, L2 1 MiB" in text and "parts.csv" in text
    sources = data["host"]["sources"]
    assert sources["process.baseline_rss_bytes"][0] == "measured"
    assert "'gen 1' less '1 sgd'" in sources["code.gemv_bytes"][1]
    # every other value, and the calibration record, as the base has them
    for section in ("time", "layout", "calibration"):
        assert data[section] == base[section]
    assert {k: v for k, v in data["code"].items() if k != "gemv_bytes"} == \
        {k: v for k, v in base["code"].items() if k != "gemv_bytes"}
    # again over its own output: the same file (the sources' entries replaced, not added)
    again = assert_calibrated_again_same(tmp_path, capsys, out, "--process-parts", d)
    assert load_profile(again).get("code.gemv_bytes") == 21845


def test_without_out_nothing_is_written(tmp_path, capsys):
    code, stdout, _ = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                               str(_parts(tmp_path))], capsys)
    assert code == 0 and "not written" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def test_bad_input_is_one_error(tmp_path, capsys):
    d = _parts(tmp_path)
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                              str(tmp_path / "none")], capsys)
    assert_one_error(code, lines, "no such file")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                              str(d), "--fit", "time.page_fault_ns"], capsys)
    assert_one_error(code, lines, "without a fit")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                              str(d), "--tlb", str(d)], capsys)
    assert_one_error(code, lines, "give one of them")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                              str(bad)], capsys)
    assert_one_error(code, lines, "expected columns")
    good = (d / "parts.csv").read_text().splitlines()
    for value, message in (("nan", "between 0 and"), ("inf", "between 0 and"),
                           ("1e300", "between 0 and"), ("-5", "between 0 and")):
        rows = good[:1] + [",".join(good[1].split(",")[:3] + [value]
                                    + good[1].split(",")[4:])] + good[2:]
        bad.write_text("\n".join(rows) + "\n")
        code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4",
                                  "--process-parts", str(bad)], capsys)
        assert_one_error(code, lines, message)
    bad.write_bytes(b"variant,run,part,rss_kib,exe_text_kib\n\xff\xfe,1,start,1,1\n")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--process-parts",
                              str(bad)], capsys)
    assert_one_error(code, lines, "cannot read it as a parts CSV")


def test_host_profile_names_the_parts_as_the_source():
    table = source_table({}, None, [], [], [], {}, parts_dir="results/hp")
    assert table["process.baseline_rss_bytes"][0] == "measured"
    assert "results/hp/parts" in table["code.gemv_bytes"][1]
    assert "process.baseline_rss_bytes" not in source_table({}, None, [], [], [], {})


def test_host_profile_step_reuses_the_parts_it_finds(tmp_path):
    """`sim host-profile --reuse-measured` writes the parts of its measured directory into
    the profile without running the probe (the probe runs where there are none)."""
    from sim.commands.host_profile import _with_parts
    d = _parts(tmp_path)
    said = []
    out = _with_parts(ROOT / "models" / "amd-epyc-zen4.toml", d, tmp_path / "p.toml", True,
                      said.append)
    profile = load_profile(out)
    assert profile.get("process.baseline_rss_bytes") == 3072000
    assert any("reusing" in m for m in said)


def test_one_writer_sets_merges_and_replaces_the_host_sources_table():
    """calibrate's set_host_sources is the one writer of [host.sources]: `sim calibrate
    --process-parts` sets entries (others kept), `sim host-profile` writes it whole."""
    from sim.commands.calibrate import HOST_SOURCES_NOTE, set_host_sources
    from sim.commands.host_profile import SOURCES_NOTE, _with_sources
    base = ["[meta]", 'platform = "linux-x86_64"', "", "[host]", 'cpu_model = "X"', "",
            "[process]", "l2_bytes = 1"]
    lines = list(base)
    set_host_sources(lines, {"process.l2_bytes": ["measured", 'a "quoted" file']})
    assert lines[5:9] == ["", "[host.sources]", *HOST_SOURCES_NOTE]
    assert lines[9] == '"process.l2_bytes" = ["measured", "a \\"quoted\\" file"]'
    set_host_sources(lines, {"code.gemv_bytes": ["measured", "b"],
                             "process.l2_bytes": ["fitted", "p1"]})
    data = tomllib.loads("\n".join(lines))
    assert data["host"]["sources"] == {"process.l2_bytes": ["fitted", "p1"],
                                       "code.gemv_bytes": ["measured", "b"]}
    assert data["process"] == {"l2_bytes": 1}
    whole = _with_sources("\n".join(lines), {"time.x_ns": ["base", "why"]})
    assert tomllib.loads(whole)["host"]["sources"] == {"time.x_ns": ["base", "why"]}
    assert "\n".join(SOURCES_NOTE) in whole and HOST_SOURCES_NOTE[0] not in whole
    assert "\n\n\n" not in whole             # the old table's blank line went with it
    with pytest.raises(UserError, match="no \\[host\\] table"):
        set_host_sources([l for l in base if l not in ("[host]", 'cpu_model = "X"')],
                         {"a.b": ["measured", "c"]})
