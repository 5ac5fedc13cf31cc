"""The one reader of the probes' CSVs (``sim calibrate --heap-refault``, ``--tlb``,
``--process-parts``): rows with their lines, a run appended to a file skipped at its
repeated header, and each bad file one error naming the file as its caller names it, the
line and the columns expected."""

import pytest

from sim.analysis.data import probe_csv_rows
from sim.errors import UserError


def _read(row):
    return row["pattern"], int(row["n"]), float(row["ns"])


def test_rows_come_with_their_lines_and_a_repeated_header_is_skipped(tmp_path):
    path = tmp_path / "tlb.csv"
    path.write_text("pattern,n,ns\npages4k,10,5.0\npattern,n,ns\nlines4k,10,1.0\n")
    rows = probe_csv_rows(path, "pattern,n,ns", _read)
    assert [(line, value) for line, _, value in rows] == [(2, ("pages4k", 10, 5.0)),
                                                         (4, ("lines4k", 10, 1.0))]
    assert rows[0][1] == {"pattern": "pages4k", "n": "10", "ns": "5.0"}


@pytest.mark.parametrize("text, said", [
    ("pattern,n,ns\npages4k,10,5.0\npages4k,x,5.0\n", "tlb.csv:3: expected columns pattern,n,ns"),
    ("pattern,n\npages4k,10\n", "tlb.csv:2: expected columns pattern,n,ns"),
    (b"pattern,n,ns\n\xff,1,1\n", "tlb.csv: cannot read it as CSV"),
])
def test_a_bad_file_is_one_error_naming_it(tmp_path, text, said):
    path = tmp_path / "tlb.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as error:
        probe_csv_rows(path, "pattern,n,ns", _read)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_caller_names_the_file_and_its_kind(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a\n1\n")
    with pytest.raises(UserError, match=r"^--heap-refault bad\.csv:2: expected columns a,b"):
        probe_csv_rows(path, "a,b", lambda row: row["b"], name="--heap-refault bad.csv")
    with pytest.raises(UserError, match=r"^x: cannot read it as a parts CSV"):
        probe_csv_rows(tmp_path / "none.csv", "a", dict, name="x", kind="a parts CSV")


def test_an_error_of_the_callers_own_passes_as_it_is(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("n\n-1\n")

    def read(row):
        if int(row["n"]) < 0:
            raise UserError("t.csv:2: n must be at least 0")

    with pytest.raises(UserError, match="^t.csv:2: n must be at least 0$"):
        probe_csv_rows(path, "n", read)
