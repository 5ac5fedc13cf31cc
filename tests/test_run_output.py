"""``sim run --out FILE`` picks the format from the file's suffix unless --format says."""

import json

import pytest

from clirun import run_cli


@pytest.mark.parametrize("name,fmt,first", [
    ("rows.csv", None, "experiment,variant,phase"),
    ("rows.json", None, "["),
    ("rows.txt", None, "experiment "),
    ("rows.csv", "table", "experiment "),
])
def test_out_suffix_picks_the_format(name, fmt, first, tmp_path, capsys):
    out = tmp_path / name
    args = ["run", "adleak-rss", "-v", "flex", "--set", "iterations=10", "--out", str(out)]
    if fmt:
        args += ["--format", fmt]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    text = out.read_text()
    assert text.startswith(first)
    if name.endswith(".json") and not fmt:
        assert json.loads(text)[0]["experiment"] == "adleak-rss"
