"""`sim compare` ends with one line of grades read from the errors.csv it wrote."""

from sim.commands.cli import _graded

HEADER = ("experiment,variant,phase,x,x_unit,metric,unit,measured,predicted,abs_error,"
          "rel_error,tolerance,ok,status,policy,profile,source,note\n")


def test_the_grades_line_counts_points_and_the_predicted_ones_apart(tmp_path):
    rows = [("true", "fitted"), ("true", "predicted"), ("true", "predicted"),
            ("false", "predicted"), ("", "unpredicted")]
    errors = tmp_path / "errors.csv"
    errors.write_text(HEADER + "".join(
        f"w,v,,{i},step,rss,MB,1,1,0,0,0.05,{ok},{status},p,q,s,\n"
        for i, (ok, status) in enumerate(rows)))
    assert _graded(errors) == (f"3 of 4 points within tolerance; predicted (no fit used "
                               f"them) 2 of 3: each point in {errors}")
