"""Run the ``sim`` CLI in-process from a test, and check its one-line errors."""

import re

from sim.commands.cli import main

#: what `sim run` prints while a run takes more than 2 s (sim.commands.progress.Heartbeat): on a
#: slow machine a test's run may print it before its error
HEARTBEAT = re.compile(r".*: .*  [\d,]+ steps registered  \d+ s$")


def run_cli(args, capsys):
    """Run the CLI; returns (exit code, stdout, non-blank stderr lines, the heartbeat's
    progress lines left out)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines()
                                if line.strip() and not HEARTBEAT.match(line)]


def assert_one_error(code, lines, *fragments):
    """Exit status 2 and exactly one ``sim: error:`` line containing every fragment."""
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("sim: error: "), lines
    assert "Traceback" not in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_calibrated_again_same(tmp_path, capsys, out, *option):
    """``sim calibrate`` over its own output ``out`` with the same ``option`` (e.g.
    ``--heap-refault DIR``) writes the same file; returns the second file's path."""
    again = tmp_path / "again.toml"
    code, _, lines = run_cli(["calibrate", "--profile", str(out), *map(str, option),
                              "--out", str(again)], capsys)
    assert code == 0, lines
    assert again.read_text() == out.read_text()
    return again
