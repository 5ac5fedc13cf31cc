"""Mistakes in a policy file or a profile that used to pass silently: each is one error
line naming the file and what is wrong, exit 2, and no output file."""


import pytest

import sim.policies as policies
from clirun import assert_one_error, run_cli
from test_policy_files import TINY_WORKLOAD
from sim import paths
from sim.policies import POLICIES
from sim.engine.profile import load_profile, profile_names

ROOT = paths.ROOT
EXAMPLE = ROOT / "experiments" / "policies" / "sweep_every_4.py"
PROFILE = (ROOT / "models" / "m2max-macos.toml").read_text()


pytestmark = pytest.mark.usefixtures("fresh_policy_registry")


# -- a policy method named like a seam, misspelt ------------------------------------------

#: line 7 of the file defines the method
ONE_METHOD = '''from sim.policies import Policy


class Fix(Policy):
    name = "fix"

    def {method}(self, *args):
        return None
'''

TYPOS = {
    "after_backwards": "after_backward",
    "afterBackward": "after_backward",
    "detatch": "detach",
    "on_registr": "on_register",
    "first_backwards": "first_backward",
    "register_untraced": "register_untracked",
}


@pytest.mark.parametrize("method", sorted(TYPOS))
def test_misspelt_seam_is_an_error_in_sim_policies(tmp_path, capsys, method):
    path = tmp_path / "fix.py"
    path.write_text(ONE_METHOD.format(method=method))
    code, out, err = run_cli(["policies", str(path)], capsys)
    assert_one_error(code, err, f"{path}:7: Fix.{method} is no seam or hook",
                     f"did you mean {TYPOS[method]}?")
    assert out == ""


def test_misspelt_seam_is_an_error_before_a_run(tmp_path, capsys):
    path = tmp_path / "fix.py"
    path.write_text(ONE_METHOD.format(method="after_backwards"))
    out = tmp_path / "rows.csv"
    code, _, err = run_cli(["run", "adleak-count", "-v", "flex.autodiff", "-p", str(path),
                            "--out", str(out)], capsys)
    assert_one_error(code, err, str(path), "Fix.after_backwards",
                     "did you mean after_backward?")
    assert not out.exists()


def test_misspelt_seam_in_a_base_class_of_the_file(tmp_path, capsys):
    path = tmp_path / "fix.py"
    path.write_text("from sim.policies import Policy\n\n\nclass Base(Policy):\n"
                    "    def on_last_handel(self, server, rc):\n        pass\n\n\n"
                    "class Fix(Base):\n    name = 'fix'\n\n\nPOLICY = Fix\n")
    code, _, err = run_cli(["policies", str(path)], capsys)
    assert_one_error(code, err, f"{path}:5: Base.on_last_handel",
                     "did you mean on_last_handle?")


# -- a seam overridden with parameters the engine cannot pass --------------------------

#: line 7 of the file defines the method
ONE_SEAM = '''from sim.policies import Policy


class Fix(Policy):
    name = "fix"

    def {method}{params}:
        return None
'''

BAD_SIGNATURES = {
    ("after_backward", "(self)"): "after_backward(self, client)",
    ("on_last_handle", "(self, server)"): "on_last_handle(self, server, rc)",
    ("register_untracked", "(self, client, rc, step, device, extra)"):
        "register_untracked(self, client, rc, step, device)",
}


@pytest.mark.parametrize("method,params", sorted(BAD_SIGNATURES))
def test_seam_with_wrong_parameters_is_an_error_in_sim_policies(tmp_path, capsys, method,
                                                                params):
    path = tmp_path / "fix.py"
    path.write_text(ONE_SEAM.format(method=method, params=params))
    code, out, err = run_cli(["policies", str(path)], capsys)
    assert_one_error(code, err, f"{path}:7: Fix.{method}{params} cannot be called as the "
                     f"seam is, {BAD_SIGNATURES[method, params]}")
    assert out == ""


def test_seam_with_wrong_parameters_is_an_error_before_a_run(tmp_path, capsys):
    path = tmp_path / "fix.py"
    path.write_text(ONE_SEAM.format(method="after_backward", params="(self)"))
    out = tmp_path / "rows.csv"
    code, _, err = run_cli(["run", "adleak-count", "-v", "a-tracked", "-p", str(path),
                            "--out", str(out)], capsys)
    assert_one_error(code, err, f"{path}:7: Fix.after_backward(self)")
    assert not out.exists()


@pytest.mark.parametrize("params", ["(self, client, every=4)", "(self, *args)",
                                    "(self, client, *args, **kwargs)", "(me, graph)"])
def test_seam_parameters_may_differ_in_names_defaults_and_extras(tmp_path, capsys, params):
    path = tmp_path / "fix.py"
    path.write_text(ONE_SEAM.format(method="after_backward", params=params))
    code, _, err = run_cli(["policies", str(path)], capsys)
    assert code == 0, err


HELPERS = '''from sim.policies.drop_release import DropRelease


class Helpers(DropRelease):
    """Helpers of its own next to its seams."""
    name = "helpers"
    rate = 0.5            # a data attribute, not a method
    horizon_steps = 4

    def after_backward(self, client):
        self._sweep(client)
        self.count_backwards()
        super().after_backward(client)

    @classmethod
    def describe(cls):                # overrides Policy's own method
        return super().describe()

    def _sweep(self, client):
        pass

    def _after_backwards(self):       # private: a helper, whatever its name
        pass

    def count_backwards(self):
        pass

    @staticmethod
    def describe_fix():
        return "helpers"
'''


def test_helpers_and_overrides_are_allowed(tmp_path, capsys):
    path = tmp_path / "helpers.py"
    path.write_text(HELPERS)
    code, out, err = run_cli(["policies", str(path), str(EXAMPLE)], capsys)
    assert code == 0, err
    assert out.startswith("helpers  (from ")
    assert "\nsweep-every-4  (from " in out


def test_no_builtin_policy_trips_the_check():
    for cls in POLICIES.values():
        policies._check_seam_names(cls, [cls], f"{cls.name}.py")


def test_sim_policies_still_lists_every_builtin(capsys):
    code, out, err = run_cli(["policies"], capsys)
    assert code == 0, err
    assert all(f"\n{name}" in "\n" + out for name in POLICIES)


# -- a seam that raises: one line naming its file and line ------------------------------

#: line 7 of the file defines the seam, line 8 raises
RAISES = '''from sim.policies import Policy


class Bad(Policy):
    name = "bad-seam"

    def register_untracked(self, client, rc, step, device):
        return rc.no_such_field
'''


def test_seam_that_raises_names_its_line(tmp_path, capsys):
    path = tmp_path / "raises.py"
    path.write_text(RAISES)
    out = tmp_path / "rows.csv"
    code, _, err = run_cli(["run", "adleak-count", "-v", "flex.autodiff", "-p", str(path),
                            "--out", str(out)], capsys)
    assert_one_error(code, err, f"{path}:8: policy bad-seam raised AttributeError")
    assert not out.exists()


def test_seam_that_raises_in_sweep_workers(tmp_path, capsys):
    """Through the process pool: the same line, the cell named, no predictions written."""
    path = tmp_path / "bad.py"
    path.write_text(RAISES)
    workload = tmp_path / "tiny.py"
    workload.write_text(TINY_WORKLOAD)
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", "-w", str(workload), "-p", "burn-0.22.1", "-p",
                            str(path), "--jobs", "2", "--out", str(out)], capsys)
    errors = [line for line in err if not line.startswith("[")]   # the progress bar
    assert_one_error(code, errors, "tiny/default/bad-seam: ",
                     f"{path}:8: policy bad-seam raised AttributeError")
    assert not (out / "predicted.csv").exists()


# -- profiles: non-finite numbers, [meta], [calibration] ----------------------------------

def test_error_line_shortens_a_long_value(tmp_path, capsys):
    text = PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = 1" + "0" * 400)
    path = tmp_path / "huge.toml"
    path.write_text(text)
    code, _, lines = run_cli(["run", "adleak-count", "--profile", str(path)], capsys)
    assert_one_error(code, lines, "...")
    assert len(lines[0]) < 200


def test_shipped_profiles_load_with_their_records():
    for name in profile_names():
        profile = load_profile(name)
        assert set(profile.data["meta"]) == {"platform", "burn_version"}
        record = profile.data["calibration"]
        assert {"fitted", "points"} <= set(record) <= {"fitted", "points", "fitted_on"}
        assert profile.fitted
        # fitted_on (written by sim calibrate since issue 43): fitted parameters only
        assert set(record.get("fitted_on", {})) <= set(record["fitted"])


def test_a_profile_without_calibration_record_loads(tmp_path):
    path = tmp_path / "hand-made.toml"
    path.write_text(PROFILE.split("\n[calibration]\n")[0] + "\n")
    profile = load_profile(path)
    assert profile.fitted == [] and "calibration" not in profile.data
