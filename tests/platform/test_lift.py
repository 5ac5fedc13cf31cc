"""An op on an autodiff device handed a plain operand lifts it onto autodiff for the op
(burn's dispatch: ``Autodiff::from_inner``, a fresh node id, node and ref count, dropped as
the op returns): ``time.lift_ns`` per operand lifted, beyond its blocks, measured by
mechanism-cost's ``gen-window`` variant (``lift/lift``). A profile without the key reads
it as 0."""

import pytest

from sim.commands.calibrate import _with
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell

from replica import QUICK_TV, replica_rows as _rows


def test_the_replica_s_lift_row_is_the_parameter():
    """gen-window's ``lift/lift`` (the lifted twin less the autodiff one, the weights'
    clones made equal) is what the model charges one lift, and nothing else: 0 without it;
    the twins move by one lift each iteration only in the lifted one, and none of the
    evaluators' rows but valid-model's ``module`` and ``linear`` (two lifts per Linear: its
    weight for the matmul, its reshaped bias for the add)."""
    base = load_profile("amd-epyc-zen4")
    off = _rows(base, "mechanism-cost", "gen-window")
    on = _rows(_with(base, {"time.lift_ns": 200.0}), "mechanism-cost", "gen-window")
    assert off[("lift/lift", 40, "ns_per_op")] == 0.0
    assert on[("lift/lift", 40, "ns_per_op")] == pytest.approx(200.0, abs=0.11)
    assert on[("lift/lifted", 40, "ns_per_op")] == pytest.approx(
        off[("lift/lifted", 40, "ns_per_op")] + 200.0, abs=0.11)
    assert on[("lift/autodiff", 40, "ns_per_op")] == off[("lift/autodiff", 40, "ns_per_op")]
    lifts = {"valid-model/module": 4, "valid-model/module/all": 4, "valid-model/linear": 2,
             "valid-model/linear/all": 2}
    for key in on:
        if key[0].startswith("lift/"):
            continue
        assert on[key] == pytest.approx(off[key] + 200.0 * lifts.get(key[0], 0), abs=0.11), key


def test_train_validate_s_valid_model_samples_hold_four_lifts():
    """Quick train-validate: valid-model's generation and validation run model.valid()'s
    plain parameters on autodiff inputs (four lifts a forward); plain's run off autodiff and
    autodiff's on the model's own parameters (none); the training steps lift nothing (a
    training report's 5 steps move by their one validation's lifts)."""
    base = load_profile("amd-epyc-zen4")
    for variant, per_sample in (("valid-model", 4), ("plain", 0), ("autodiff", 0)):
        off = _rows(base, "train-validate", variant, QUICK_TV)
        on = _rows(_with(base, {"time.lift_ns": 1000.0}), "train-validate", variant, QUICK_TV)
        assert on.keys() == off.keys()
        for key in on:
            if key[2] != "ms_per_step":
                assert on[key] == off[key], (variant, key)
            elif key[0] == "generate" and key[1] > 5:
                assert on[key] - off[key] == pytest.approx(per_sample * 1000.0 / 1e6,
                                                           abs=2e-9), (variant, key)
            elif key[0] == "train":
                # each report's 5 steps hold one validation of 2 batches
                assert on[key] - off[key] == pytest.approx(2 * per_sample * 1000.0 / 5 / 1e6,
                                                           abs=2e-9), (variant, key)


def test_committed_profiles_do_not_charge_it():
    for name in ("linux-x86_64", "amd-epyc-zen4", "amd-epyc-zen4-long", "m2max-macos"):
        assert load_profile(name).get("time.lift_ns") == 0.0, name


def test_the_pytorch_reference_is_not_charged_burn_s_lift():
    """PyTorch has no autodiff tensor to wrap a plain operand in: under the ``pytorch``
    reference the lift costs nothing whatever the profile says (it was charged through
    Timing.lift, which AtenTiming did not override; review of session 60's merge)."""
    base = load_profile("amd-epyc-zen4")

    def rows(profile):
        got = run_cell("train-validate", "valid-model", "pytorch", profile, QUICK_TV,
                       observables=False)
        return [(r.get("phase", ""), r["x"], r["metric"], r["value"]) for r in got]
    assert rows(_with(base, {"time.lift_ns": 1000.0})) == rows(base)
