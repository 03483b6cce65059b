import pytest

from evalpipeline.stats.judge import judge_corrected_accuracy, rogan_gladen


def test_rogan_gladen_inverts_the_pass_rate_formula():
    # Post: accuracy 0.85, sensitivity 0.92, specificity 0.85 -> expected pass rate 0.8045.
    rate = 0.92 * 0.85 + 0.15 * 0.15
    assert rate == pytest.approx(0.8045)
    assert rogan_gladen(rate, 0.92, 0.85) == pytest.approx(0.85)
    with pytest.raises(ValueError, match="chance"):
        rogan_gladen(0.6, 0.5, 0.5)


@pytest.mark.parametrize(
    "prior,mean,low,high",
    [
        ((2, 2), 0.867, 0.785, 0.952),
        ((1, 1), 0.884, 0.796, 0.979),
        ((0.5, 0.5), 0.901, 0.803, 0.998),
        ((8, 2), 0.878, 0.799, 0.963),
        ((2, 8), 0.809, 0.735, 0.880),
    ],
)
def test_post_judge_example_and_prior_sweep(prior, mean, low, high):
    # Post: 323/400 judge passes; calibration 72/80 known-good passed, 51/60 known-bad failed (PyMC, MCMC noise ~0.003).
    result = judge_corrected_accuracy(323, 400, 72, 80, 51, 60, prior=prior)
    assert [result["corrected_mean"], result["corrected_low"], result["corrected_high"]] == pytest.approx(
        [mean, low, high], abs=0.006
    )
    assert result["corrected_low"] < 0.85 < result["corrected_high"]


def test_naive_reading_misses_the_planted_truth():
    result = judge_corrected_accuracy(323, 400, 72, 80, 51, 60)
    assert [result["naive_mean"], result["naive_low"], result["naive_high"]] == pytest.approx(
        [0.804, 0.764, 0.842], abs=6e-4
    )
    assert result["rogan_gladen"] == pytest.approx((323 / 400 + 51 / 60 - 1) / (72 / 80 + 51 / 60 - 1))


def test_refuses_a_near_chance_judge():
    with pytest.raises(ValueError, match="too close to chance"):
        judge_corrected_accuracy(200, 400, 44, 80, 33, 60)
    with pytest.raises(ValueError, match="good_passed of n_good"):
        judge_corrected_accuracy(200, 400, 90, 80, 33, 60)


def test_known_sensitivity_and_specificity_have_no_calibration_uncertainty():
    from evalpipeline.stats.judge import JudgeCalibration, check_judge

    known = judge_corrected_accuracy(323, 400, calibration=JudgeCalibration("judge", sensitivity=0.9, specificity=0.85))
    measured = judge_corrected_accuracy(323, 400, 72, 80, 51, 60)
    assert known["rogan_gladen"] == pytest.approx((323 / 400 + 0.85 - 1) / (0.9 + 0.85 - 1))
    assert known["corrected_high"] - known["corrected_low"] < measured["corrected_high"] - measured["corrected_low"]
    assert known["corrected_low"] < known["rogan_gladen"] < known["corrected_high"]
    with pytest.raises(ValueError, match="scorer 'coin'.*too close to chance"):
        check_judge(JudgeCalibration("coin", sensitivity=0.55, specificity=0.5))
    with pytest.raises(ValueError, match="either the calibration counts"):
        JudgeCalibration("mixed", good_passed=1, n_good=2, bad_failed=1, n_bad=2, sensitivity=0.9, specificity=0.9)
    with pytest.raises(ValueError, match="either the calibration counts"):
        JudgeCalibration("half", sensitivity=0.9)


def test_fractional_passes_read_quasi_binomially():
    # a design-aware headline's effective counts: 323/400 at a design effect of 2 is 161.5 of 200
    whole = judge_corrected_accuracy(323, 400, 72, 80, 51, 60)
    effective = judge_corrected_accuracy(161.5, 200, 72, 80, 51, 60)
    assert effective["rogan_gladen"] == pytest.approx(whole["rogan_gladen"])  # the same pass rate
    assert effective["corrected_high"] - effective["corrected_low"] > whole["corrected_high"] - whole["corrected_low"]
