"""`sim calibrate --tlb DIR` writes the data TLB's entries, ways and cost per missed read from
the sweep-scan probe's `tlb` output and its miss curves from the `tlbr` rows (no fit), names the files and the host in the values'
comments, and refuses bad input with one error line before writing anything."""

import tomllib

import pytest

from clirun import assert_one_error, run_cli
from sim import paths
from sim.analysis.tlb import parse_cpuid_line, read_tlb_dir, read_tlbr_dir, tlb_read_cost
from sim.errors import UserError

ROOT = paths.ROOT
MEASURED = ROOT / "experiments" / "measured" / "linux-x86_64" / "sweep-levels"
MEASURED_S54 = MEASURED / "s54"
MEASURED_S60 = ROOT / "experiments" / "measured" / "amd-epyc-zen4-sweep-order-s60" / "tlb"


def _probe_dir(tmp_path, cpuid="cpuid 0x80000006: L2 DTLB 4K 2048 entries, associativity code 8",
               host="host: Some CPU (family 1 model 2)"):
    d = tmp_path / "tlb"
    d.mkdir()
    (d / "tlb.stderr").write_text(f"{host}\n{cpuid}\n")
    rows = ["pattern,n,ns"]
    for n in (1024, 4096, 8192, 16384, 65536, 131072):
        rows += [f"pages4k,{n},{1.0 + (7.0 if n >= 4096 else 0.0) + n / 1e6}", f"lines4k,{n},1.0"]
    (d / "tlb.csv").write_text("\n".join(rows) + "\n")
    return d


def test_the_probe_output_gives_entries_ways_and_the_median_cost(tmp_path):
    tlb = read_tlb_dir(_probe_dir(tmp_path))
    assert (tlb["entries"], tlb["ways"]) == (2048, 16)
    # sizes 4,096-65,536 pages (2x to 32x 2,048): 7 ns more and the n / 1e6 of each
    assert tlb["sizes"] == 4
    assert tlb["ns"] == pytest.approx(7.0 + (8192 + 16384) / 2 / 1e6)
    assert tlb["host"] == "Some CPU (family 1 model 2)"
    assert parse_cpuid_line("nothing") is None
    with pytest.raises(UserError):
        tlb_read_cost({"pages4k": {10: 1.0}, "lines4k": {10: 1.0}}, 3072)


def test_the_committed_measurement_gives_the_profiles_values():
    # session 49's `tlb` rows (the profile's cost of a miss until session 54)
    tlb = read_tlb_dir(MEASURED)
    assert (tlb["entries"], tlb["ways"], round(tlb["ns"], 3)) == (3072, 8, 6.124)
    assert "family 25 model 17" in tlb["host"]
    # session 54's: three batches (tlb and tlbr rows at R = 1-8, 10), the profiles' values
    tlb = read_tlb_dir(MEASURED_S54)
    assert (tlb["entries"], tlb["ways"], round(tlb["ns"], 3)) == (3072, 8, 5.707)
    curves = read_tlbr_dir(MEASURED_S54 / "tlbr", 3072, 5.707)
    for name in ("amd-epyc-zen4",):
        data = tomllib.loads((ROOT / "models" / f"{name}.toml").read_text())
        assert data["process"]["dtlb_entries"] == 3072 and data["process"]["dtlb_ways"] == 8
        assert data["time"]["sweep_tlb_read_ns"] == 5.707
        assert data["time"]["sweep_tlb_miss_reads"] == curves["reads"] == [
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0]
        assert data["time"]["sweep_tlb_miss_reach"] == curves["reach"]
        assert data["time"]["sweep_tlb_miss"] == curves["miss"]
    # keys ten to a page miss less than one to a page past the reach, and pages read 4-8
    # times a pass miss within 0.07 of ten (at 1.35x and 2.7x the reach; 3 times within
    # 0.11), not half way to one as the log-interpolation between R = 1 and 10 had it
    miss = curves["miss"]
    assert miss[-1][-1] < miss[0][-1]
    for i in (8, 12):
        assert all(abs(miss[r][i] - miss[-1][i]) < 0.07 for r in range(3, 8))
        assert abs(miss[2][i] - miss[-1][i]) < 0.11
        assert miss[-1][i] < miss[1][i] < miss[0][i]
    # the far-apart pages of session 51 (fill 0.005) are not among the rows curves take
    old = read_tlbr_dir(MEASURED / "tlbr", 3072, 6.124)
    assert all("0.005" not in path.name for path in old["files"])


def test_the_session_60_holds_give_amd_epyc_zen4_long_its_values():
    from sim.analysis.tlb import read_order_dir
    # thirteen holds over 53 minutes (tlb, tlbr and order rows of both runs' layouts):
    # amd-epyc-zen4-long's TLB values, its sweep-order curves one set per layout
    tlb = read_tlb_dir(MEASURED_S60)
    assert (tlb["entries"], tlb["ways"], round(tlb["ns"], 3)) == (3072, 8, 5.945)
    curves = read_tlbr_dir(MEASURED_S60 / "tlbr", 3072, 5.945)
    order = read_order_dir(MEASURED_S60 / "order", 3072, 5.945)
    assert len(order["files"]) == 26
    assert sorted(set(order["spacing"])) == [423.0, 547.1]
    time = tomllib.loads((ROOT / "models" / "amd-epyc-zen4-long.toml").read_text())["time"]
    assert time["sweep_tlb_read_ns"] == 5.945
    assert time["sweep_tlb_miss_reads"] == curves["reads"] == [1.0, 2.0, 3.0, 4.0, 6.0, 8.0]
    assert time["sweep_tlb_miss"] == curves["miss"]
    for key in ("reads", "reach", "miss", "spacing"):
        assert time[f"sweep_tlb_order_{key}"] == order[key]
    # in each layout's curve of the whole chain (the live key last in the hash order) the
    # reads miss more at ema-balanced's spacing than at p10-ema's, past ~0.9 of the reach
    p10, eb = (order["miss"][i] for i, s in enumerate(order["spacing"])
               if i + 1 == len(order["spacing"]) or order["spacing"][i + 1] != s)
    assert eb[-1] > p10[-1] > 0.1


def test_runs_appended_to_the_tlb_rows_enter_as_their_mean(tmp_path):
    d = _probe_dir(tmp_path)
    text = (d / "tlb.csv").read_text()
    (d / "tlb.csv").write_text(text + text.replace("pages4k,8192,8.008192", "pages4k,8192,10.008192"))
    # 8,192 pages: 7 and 9 ns more in the two runs, 8 their mean (the header repeated
    # between the runs is skipped); the median of 4,096-65,536 pages moves up a size
    assert read_tlb_dir(d)["ns"] == pytest.approx((7.016384 + 7.065536) / 2)


def test_calibrate_tlb_writes_the_three_values_with_their_source(tmp_path, capsys):
    out = tmp_path / "p.toml"
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb",
                              str(_probe_dir(tmp_path)), "--out", str(out)], capsys)
    assert code == 0, lines
    text = out.read_text()
    data = tomllib.loads(text)
    assert data["process"]["dtlb_entries"] == 2048 and data["process"]["dtlb_ways"] == 16
    assert data["time"]["sweep_tlb_read_ns"] == pytest.approx(7.012, abs=1e-3)
    # the TLB's entries, its cost a miss, and the two (empty) curves' notes
    assert text.count("`sim calibrate --tlb`") == 4 and "Some CPU (family 1 model 2)" in text
    # no tlbr/ rows beside tlb.csv: no measured curve (the base's is not another host's)
    assert data["time"]["sweep_tlb_miss_reads"] == [] and data["time"]["sweep_tlb_miss"] == []
    # everything else as the base has it
    base = tomllib.loads((ROOT / "models" / "amd-epyc-zen4.toml").read_text())
    assert data["time"]["scan_node_ns"] == base["time"]["scan_node_ns"]
    assert data.get("calibration") == base.get("calibration")


def test_calibrate_tlb_refuses_bad_input_before_writing(tmp_path, capsys):
    out = tmp_path / "p.toml"
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb",
                              str(tmp_path / "none"), "--out", str(out)], capsys)
    assert_one_error(code, lines, "no tlb.csv")
    d = _probe_dir(tmp_path, cpuid="no cpuid here")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                              "--out", str(out)], capsys)
    assert_one_error(code, lines, "cpuid")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                              "--fit", "time.scan_node_ns"], capsys)
    assert_one_error(code, lines, "without a fit")
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4"], capsys)
    assert_one_error(code, lines, "--measured")
    assert not out.exists()


def test_host_profile_puts_the_probes_tlb_into_the_profile(tmp_path):
    from sim.commands.host_profile import _with_tlb
    from sim.engine.profile import MODELS_DIR, load_profile
    base = MODELS_DIR / "linux-x86_64.toml"
    said = []
    # the probe's output already in the measured dir (--reuse-measured): no probe run
    out = _with_tlb(base, _probe_dir(tmp_path), tmp_path / "with-tlb.toml", True, said.append)
    profile = load_profile(str(out))
    assert (profile.get("process.dtlb_entries"), profile.get("process.dtlb_ways")) == (2048, 16)
    assert profile.get("time.sweep_tlb_read_ns") == pytest.approx(7.012)
    assert profile.get("time.scan_node_ns") == load_profile("linux-x86_64").get("time.scan_node_ns")
    # a probe that names no TLB (not x86_64): the profile as it was, nothing written
    other = tmp_path / "other"
    other.mkdir()
    no_tlb = _probe_dir(other, cpuid="")
    assert _with_tlb(base, no_tlb, other / "x.toml", True, said.append) == base
    assert not (other / "x.toml").exists()
    assert any("no data TLB" in line for line in said)


def test_host_profile_tlb_stage_without_the_probe_binary(tmp_path, monkeypatch):
    import sim.commands.measure as measure
    from sim.commands.host_profile import measure_tlb
    monkeypatch.setattr(measure, "binary_path", lambda gpu=False: tmp_path / "burn-probes")
    with pytest.raises(UserError, match="sweep-scan is missing"):
        measure_tlb(tmp_path / "tlb")
    assert not (tmp_path / "tlb").exists()


def test_calibrate_tlb_writes_the_miss_curves_of_the_tlbr_rows(tmp_path, capsys):
    d = _probe_dir(tmp_path)
    (d / "tlbr").mkdir()
    rows = ["pattern,pages,per_page,fill,keys,ns"]
    for per_page, fill in ((1, 1), (10, 0.63), (8, 0.005)):
        for pages, extra in ((1024, 0.0), (2048, 0.7), (4096, 3.5)):
            rows += [f"spread4k,{pages},{per_page},{fill},{pages * per_page},"
                     f"{1.0 + extra / per_page}",
                     f"lines4k,{pages},{per_page},{fill},{pages * per_page},1.0"]
    (d / "tlbr" / "r.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "p.toml"
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                              "--out", str(out)], capsys)
    assert code == 0, lines
    time = tomllib.loads(out.read_text())["time"]
    assert time["sweep_tlb_miss_reads"] == [1.0, 10.0]          # fill 0.005 left out
    # the pages read: the key pages and their keys' 32-B slots, over 2,048 entries
    assert time["sweep_tlb_miss_reach"][0] == [0.5039, 1.0078, 2.0156]
    assert time["sweep_tlb_miss"][0] == [0.0, round(0.7 / 7.012, 3), round(3.5 / 7.012, 3)]
    assert time["sweep_tlb_miss"][1] == [0.0, round(0.07 / 7.012, 3), round(0.35 / 7.012, 3)]


def test_a_profile_with_a_bad_miss_curve_is_refused(tmp_path):
    from sim.engine.profile import ProfileError, load_profile
    text = (ROOT / "models" / "amd-epyc-zen4.toml").read_text()
    reads = "sweep_tlb_miss_reads = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0]"
    for old, new in ((reads, reads.replace("8.0, 10.0", "10.0, 8.0")),
                     (reads, "sweep_tlb_miss_reads = [1.0]"),
                     ("sweep_tlb_miss = [[0.0,", "sweep_tlb_miss = [[1.5,"),
                     ("sweep_tlb_miss = [[0.0,", "sweep_tlb_miss = [['a',")):
        assert old in text
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace(old, new))
        with pytest.raises(ProfileError, match="sweep_tlb_miss"):
            load_profile(str(bad))


def _order_rows(d, extra):
    """An `order/` directory beside the probe's rows: a chain of 8 keys a page at 1,024,
    2,048 and 4,096 pages, its live key at a quarter and at the end of the hash order,
    ``extra(pages, frac)`` ns more a read with the keys at their spacing."""
    (d / "order").mkdir()
    rows = ["pattern,pages,keys,frac,prefix,touched,table_pages,ns"]
    for pages in (1024, 2048, 4096):
        keys = 8 * pages
        for frac in (0.25, 1.0):
            prefix = int(frac * keys)
            rows += [f"order4k,{pages},{keys},{frac},{prefix},{pages},0,{1.0 + extra(pages, frac)}",
                     f"orderln,{pages},{keys},{frac},{prefix},{keys // 64},0,1.0"]
    (d / "order" / "order-a.csv").write_text("\n".join(rows) + "\n")


def _calibrated(tmp_path, d, capsys):
    """The text of amd-epyc-zen4 calibrated with the probe's output in ``d``."""
    out = tmp_path / "p.toml"
    code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                              "--out", str(out)], capsys)
    assert code == 0, lines
    return out.read_text()


def test_calibrate_tlb_writes_the_sweep_order_curves_of_the_order_rows(tmp_path, capsys):
    from sim.analysis.tlb import _table_bytes
    from sim.platform.l2_cache import sweep_tlb_point
    d = _probe_dir(tmp_path)
    _order_rows(d, lambda pages, frac: {1024: 0.0, 2048: 0.7, 4096: 3.5}[pages] * frac)
    text = _calibrated(tmp_path, d, capsys)
    time = tomllib.loads(text)["time"]
    # one curve a place of the live key, at the reads per page and pages read (over 2,048
    # entries) where the sweep's model reads its curve for that pass
    points = [sweep_tlb_point(f * 8 * p, 8 * p, 512.0, _table_bytes(8 * p), 2048 * 4096)
              for f in (0.25, 1.0) for p in (1024, 2048, 4096)]
    assert time["sweep_tlb_order_reads"] == [
        round(sum(r for _, r in points[:3]) / 3, 3), 8.0]
    assert time["sweep_tlb_order_reach"] == [[round(x, 4) for x, _ in points[:3]],
                                             [round(x, 4) for x, _ in points[3:]]]
    assert time["sweep_tlb_order_miss"] == [
        [0.0, round(0.175 / 7.012, 3), round(0.875 / 7.012, 3)],
        [0.0, round(0.7 / 7.012, 3), round(3.5 / 7.012, 3)]]
    assert "sweep-scan order" in text and "order/order-a.csv" in text
    # the sweep then reads them (Timing.tlb_source)
    from sim.engine.profile import load_profile
    from sim.platform.timing import Timing
    profile = load_profile(str(tmp_path / "p.toml"))
    caches = Timing.caches(type("P", (), profile.data["process"]))
    assert Timing(None, profile.data["time"], caches).tlb_source == "order"


def test_a_profile_without_the_sweep_order_rows_keeps_the_random_order_curve(tmp_path, capsys):
    from sim.engine.profile import load_profile
    from sim.platform.timing import Timing
    from sim.commands.sweep import tlb_curve_source
    # amd-epyc-zen4 has no sweep_tlb_order_* keys: they read as empty, the sweep as before,
    # and the report says so
    base = (ROOT / "models" / "amd-epyc-zen4.toml").read_text()
    assert "sweep_tlb_order" not in base
    profile = load_profile("amd-epyc-zen4")
    assert profile.data["time"].get("sweep_tlb_order_reads", []) == []
    caches = Timing.caches(type("P", (), profile.data["process"]))
    assert Timing(None, profile.data["time"], caches).tlb_source == "random"
    assert "random-order" in tlb_curve_source(profile)
    assert "2 key layouts (423, 547.1 B a key)" in tlb_curve_source(
        load_profile("amd-epyc-zen4-long"))
    assert tlb_curve_source(load_profile("m2max-macos")) is None
    # calibrate --tlb without order/ rows adds the keys, empty, and says why
    d = _probe_dir(tmp_path)
    text = _calibrated(tmp_path, d, capsys)
    time = tomllib.loads(text)["time"]
    assert time["sweep_tlb_order_reads"] == time["sweep_tlb_order_miss"] == []
    assert "the sweep reads the random-order curves above" in text


def test_calibrate_tlb_refuses_bad_order_rows_before_writing(tmp_path, capsys):
    d = _probe_dir(tmp_path)
    _order_rows(d, lambda pages, frac: 0.0)
    path = d / "order" / "order-a.csv"
    good = path.read_text()
    out = tmp_path / "p.toml"
    for bad, said in ((good.replace("order4k,1024,8192,0.25", "order4k,1024,x,0.25"),
                       "expected columns"),
                      (good.replace("orderln,", "lines4k,"), "pattern 'lines4k'"),
                      ("pattern,pages,keys,frac,prefix,touched,table_pages,ns\n", "no order rows")):
        path.write_text(bad)
        code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                                  "--out", str(out)], capsys)
        assert_one_error(code, lines, said)
        assert not out.exists()


def test_calibrate_tlb_refuses_unreadable_or_degenerate_probe_files(tmp_path, capsys):
    """Files that are not UTF-8, a miss that costs nothing and order rows on 0 pages or
    reading no key each gave a traceback (UnicodeDecodeError, ZeroDivisionError)."""
    out = tmp_path / "p.toml"

    def refused(d, said):
        code, _, lines = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                                  "--out", str(out)], capsys)
        assert_one_error(code, lines, said)
        assert not out.exists()

    def probe_dir(name, **kw):
        (tmp_path / name).mkdir()
        return _probe_dir(tmp_path / name, **kw)

    for name in ("tlb.stderr", "tlb.csv"):
        d = probe_dir(name)
        (d / name).write_bytes((d / name).read_bytes() + b"\xff\xfe\n")
        refused(d, f"{name}: cannot read it")
    d = probe_dir("lscpu", host="")
    (d / "lscpu.txt").write_bytes(b"Model name: \xff\n")
    refused(d, "lscpu.txt: cannot read it")
    d = probe_dir("free")
    (d / "tlb.csv").write_text("pattern,n,ns\n" + "".join(
        f"{p},{n},1.0\n" for n in (4096, 8192, 65536) for p in ("pages4k", "lines4k")))
    refused(d, "tlb.csv: pages4k rows are not slower than lines4k rows")
    (d / "tlb.csv").write_text("pattern,n,ns\npages4k,10,5.0\nlines4k,10,1.0\n")
    refused(d, "tlb.csv: no pages4k and lines4k rows at")
    d = probe_dir("order")
    _order_rows(d, lambda pages, frac: 0.5)
    path = d / "order" / "order-a.csv"
    good = path.read_text()
    for bad in (good.replace("order4k,1024,8192,", "order4k,0,8192,"),
                good.replace("order4k,1024,8192,1.0,8192,", "order4k,1024,8192,1.0,0,"),
                good.replace("order4k,1024,8192,1.0,8192,", "order4k,1024,8192,1.0,9000,")):
        path.write_text(bad)
        refused(d, "order-a.csv: a row of pattern 'order4k'")
    path.write_bytes(good.encode() + b"\xff\n")
    refused(d, "order-a.csv: cannot read it as CSV")


@pytest.mark.parametrize("ns", ["inf", "nan", "-3.0", "-inf"])
def test_a_tlb_row_whose_ns_is_not_a_finite_time_is_one_error(ns, tmp_path, capsys):
    """Such a row was read as it was: an infinity or a negative time moved the median, a
    nan gave 'not slower' (review, session 57). One error naming the file and its line."""
    d = _probe_dir(tmp_path)
    lines = (d / "tlb.csv").read_text().splitlines()
    lines[5] = f"pages4k,8192,{ns}"          # line 6 of the file
    (d / "tlb.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=rf"tlb\.csv:6: ns must be a finite time"):
        read_tlb_dir(d)
    out = tmp_path / "p.toml"
    code, _, said = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                             "--out", str(out)], capsys)
    assert_one_error(code, said, f"{d / 'tlb.csv'}:6: ", repr(ns))
    assert not out.exists()


@pytest.mark.parametrize("ns", ["nan", "inf", "-1.5"])
def test_an_order_or_tlbr_row_whose_ns_is_not_a_finite_time_is_one_error(ns, tmp_path, capsys):
    """The miss curves' rows as tlb.csv's: a time that is not finite or below 0 is one error
    naming the file (it went through: the curves clamp a share to 0-1)."""
    d = _probe_dir(tmp_path)
    _order_rows(d, lambda pages, frac: 0.5)
    path = d / "order" / "order-a.csv"
    path.write_text(path.read_text().replace("order4k,2048,16384,1.0,16384,2048,0,1.5",
                                             f"order4k,2048,16384,1.0,16384,2048,0,{ns}"))
    out = tmp_path / "p.toml"
    code, _, said = run_cli(["calibrate", "--profile", "amd-epyc-zen4", "--tlb", str(d),
                             "--out", str(out)], capsys)
    assert_one_error(code, said, "order-a.csv: ns must be a finite time", repr(ns))
    assert not out.exists()
    tlbr = tmp_path / "tlbr"
    tlbr.mkdir()
    (tlbr / "a.csv").write_text("pattern,pages,per_page,fill,keys,ns\n"
                                "spread4k,3072,10,1,30720,1.5\n"
                                f"lines4k,3072,10,1,30720,{ns}\n")
    with pytest.raises(UserError, match=r"a\.csv: ns must be a finite time"):
        read_tlbr_dir(tlbr, 3072, 5.0)


def test_order_rows_of_two_layouts_give_each_its_curves_and_a_graph_reads_its_own(tmp_path,
                                                                                 capsys):
    from sim.engine.profile import ProfileError, load_profile
    from sim.platform.timing import Timing
    from sim.commands.sweep import tlb_curve_source
    d = _probe_dir(tmp_path)
    # layout a: 8 keys a page (512 B a key), misses only at 4,096 pages; layout b: the same
    # keys 4 a page (1,024 B a key, a second file), missing from 2,048 pages on, dearer
    _order_rows(d, lambda pages, frac: {1024: 0.0, 2048: 0.0, 4096: 3.5}[pages])
    rows = ["pattern,pages,keys,frac,prefix,touched,table_pages,ns"]
    for pages in (1024, 2048, 4096):
        keys = 4 * pages
        for frac in (0.25, 1.0):
            prefix = int(frac * keys)
            extra = {1024: 0.0, 2048: 1.4, 4096: 7.0}[pages]
            rows += [f"order4k,{pages},{keys},{frac},{prefix},{pages},0,{1.0 + extra}",
                     f"orderln,{pages},{keys},{frac},{prefix},{keys // 64},0,1.0"]
    (d / "order" / "order-b.csv").write_text("\n".join(rows) + "\n")
    text = _calibrated(tmp_path, d, capsys)
    time = tomllib.loads(text)["time"]
    # each layout its own curves, named by its key spacing (pages x 4096 / keys)
    assert time["sweep_tlb_order_spacing"] == [512.0, 512.0, 1024.0, 1024.0]
    assert time["sweep_tlb_order_miss"][:2] == [[0.0, 0.0, round(3.5 / 7.012, 3)]] * 2
    assert time["sweep_tlb_order_miss"][2:] == [
        [0.0, round(1.4 / 7.012, 3), round(7.0 / 7.012, 3)]] * 2
    assert "read 2" in text and "TlbLayoutCurves" in text
    profile = load_profile(str(tmp_path / "p.toml"))
    caches = Timing.caches(type("P", (), profile.data["process"]))
    timing = Timing(None, profile.data["time"], caches)
    assert timing.tlb_source == "order" and timing.tlb_layouts.spacings == (512.0, 1024.0)
    assert "2 key layouts (512, 1024 B a key)" in tlb_curve_source(profile)

    def extra_ns(spacing, n=6000):
        # one graph of n keys read whole once (no live key), its keys ``spacing`` B apart
        return timing._sweep_reads([(1, 1, n, 0, 0, 1, 1, spacing)])[1] / n

    def curve(spacing, n=6000):
        # the same graph read off one layout's curves alone
        one = dict(profile.data["time"])
        keep = [i for i, s in enumerate(one["sweep_tlb_order_spacing"]) if s == spacing]
        for key in ("sweep_tlb_order_reads", "sweep_tlb_order_reach", "sweep_tlb_order_miss"):
            one[key] = [one[key][i] for i in keep]
        one["sweep_tlb_order_spacing"] = []
        t = Timing(None, one, caches)
        return t._sweep_reads([(1, 1, n, 0, 0, 1, 1, spacing)])[1] / n

    # a graph at a measured spacing reads that layout's curves, the same as a profile of
    # that layout alone; between them, linearly between the two; outside, the nearest
    for s in (512.0, 1024.0):
        assert extra_ns(s) == pytest.approx(curve(s))
    a, b = timing.tlb_layouts.curves
    w = (768.0 - 512.0) / 512.0
    half = Timing(None, profile.data["time"], caches)
    assert half.tlb_layouts.at(768.0)(1.2, 4.0) == pytest.approx(
        (1 - w) * a(1.2, 4.0) + w * b(1.2, 4.0))
    assert timing.tlb_layouts.at(300.0) is a and timing.tlb_layouts.at(2000.0) is b
    # a spacing list that does not name each curve's layout is refused
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("sweep_tlb_order_spacing = [512.0, 512.0, 1024.0, 1024.0]",
                                "sweep_tlb_order_spacing = [1024.0, 1024.0, 512.0, 512.0]"))
    with pytest.raises(ProfileError, match="sweep_tlb_order_spacing"):
        load_profile(str(bad))
