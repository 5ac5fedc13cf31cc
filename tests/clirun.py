"""Run the ``sim`` CLI in-process from a test, and check its one-line errors."""

from sim.cli import main


def run_cli(args, capsys):
    """Run the CLI; returns (exit code, stdout, non-blank stderr lines)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def assert_one_error(code, lines, *fragments):
    """Exit status 2 and exactly one ``sim: error:`` line containing every fragment."""
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("sim: error: "), lines
    assert "Traceback" not in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
