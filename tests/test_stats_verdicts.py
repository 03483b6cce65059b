import pytest

from evalpipeline.stats.verdicts import hpdi_overlap_fraction, hpdi_verdict, probability_band, probability_verdict


def test_hpdi_rule_of_hibayes_figure_3():
    assert hpdi_verdict(0.44, 0.49, 0.83, 0.85) == "different"  # the paper's domain 1 vs domain 2 example
    assert hpdi_verdict(0.50, 0.60, 0.45, 0.65) == "equivalent"  # narrower inside wider
    assert hpdi_verdict(0.45, 0.65, 0.50, 0.60) == "equivalent"
    assert hpdi_verdict(0.50, 0.60, 0.55, 0.70) == "inconclusive"
    assert hpdi_verdict(0.50, 0.60, 0.60, 0.70) == "inconclusive"  # touching intervals share a point
    with pytest.raises(ValueError, match="low > high"):
        hpdi_verdict(0.6, 0.5, 0.1, 0.2)


def test_overlap_fraction():
    assert hpdi_overlap_fraction(0.44, 0.49, 0.83, 0.85) == 0.0
    assert hpdi_overlap_fraction(0.50, 0.60, 0.45, 0.65) == pytest.approx(1.0)
    assert hpdi_overlap_fraction(0.50, 0.60, 0.55, 0.70) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "p,band",
    [
        (0.5, "too close to call"),
        (0.59, "too close to call"),
        (0.6, "leaning"),
        (0.663, "leaning"),
        (0.72, "likely"),
        (0.949, "likely"),
        (0.95, "confident"),
        (0.989, "confident"),
        (0.99, "near-certain"),
        (0.28, "likely"),
        (0.0, "near-certain"),
    ],
)
def test_ladder_cut_points(p, band):
    assert probability_band(p) == band


def test_sentences_carry_the_hedge_and_the_direction():
    assert probability_verdict(0.72, "new", "old") == "new is likely better than old (72% probability)"
    assert probability_verdict(0.28, "new", "old") == "old is likely better than new (72% probability)"
    assert "too close to call" in probability_verdict(0.55, "new", "old")
    assert "not enough to act on" in probability_verdict(0.65, "new", "old")
    assert probability_verdict(0.999, "a", "b") == "a is almost certainly better than b (99.9% probability)"
    assert probability_verdict(0.03, "a", "b") == "b is confidently better than a (97% probability)"
    with pytest.raises(ValueError):
        probability_band(1.2)
