import math

import pytest

from evalpipeline.ingest.scores import ScoreNormalisation, binary_reading


def test_default_letter_grades():
    norm = ScoreNormalisation()
    assert [norm.normalise(v).score for v in ["C", "I", "P", "N"]] == [1.0, 0.0, 0.5, 0.0]
    assert norm.normalise("C").raw == '"C"'


@pytest.mark.parametrize("value", ["Q", "c", "correct", ""])
def test_unknown_strings_are_quarantined_never_zero(value):
    out = ScoreNormalisation().normalise(value)
    assert out.score is None
    assert "unknown score value" in out.reason and repr(value) in out.reason


def test_custom_value_map():
    norm = ScoreNormalisation(value_map={"correct": 1.0, "wrong": 0.0})
    assert norm.normalise("correct").score == 1.0
    assert norm.normalise("C").reason is not None


def test_numeric_range_rescales_and_guards():
    norm = ScoreNormalisation(numeric_range=(0, 10))
    assert norm.normalise(7).score == pytest.approx(0.7)
    assert norm.normalise(10.5).reason.startswith("score 10.5 outside numeric_range [0, 10]")
    assert "not finite" in norm.normalise(math.nan).reason
    assert "not finite" in norm.normalise(math.inf).reason


def test_booleans_dicts_lists_and_nulls():
    norm = ScoreNormalisation()
    assert norm.normalise(True).score == 1.0 and norm.normalise(False).score == 0.0
    assert "set score_key" in norm.normalise({"a": 1}).reason
    keyed = ScoreNormalisation(score_key="acc")
    assert keyed.normalise({"acc": "C", "f1": 0.3}).score == 1.0
    assert "no key 'acc'" in keyed.normalise({"f1": 0.3}).reason
    assert "unsupported score type list" == norm.normalise([1]).reason
    assert norm.normalise(None).reason == "score value is null"


def test_invalid_configuration_is_refused():
    with pytest.raises(ValueError, match="low < high"):
        ScoreNormalisation(numeric_range=(1, 1))
    with pytest.raises(ValueError, match="outside"):
        ScoreNormalisation(value_map={"C": 2.0})


def test_binary_reading():
    assert [binary_reading(v) for v in (1.0, 0.0, 0.5, None)] == [True, False, None, None]
