import argparse

import pytest

from evalpipeline.cli.plan import add_plan_subcommand
from evalpipeline.stats.planning import (
    analytic_standard_error,
    design_power,
    floor_standard_error,
    power_table,
    repeats_versus_questions,
    sample_size_for_power,
)


@pytest.mark.slow
def test_post_power_table_is_reproduced():
    # Post, section 6 (3000 simulated evals per cell, P(B > A) >= 0.95, baseline 0.70).
    published = {
        (0.05, 100): 0.20,
        (0.05, 400): 0.46,
        (0.05, 800): 0.72,
        (0.05, 1600): 0.95,
        (0.025, 400): 0.19,
        (0.025, 1600): 0.47,
        (0.025, 3200): 0.72,
    }
    for (gap, n), power in published.items():
        # Two independent 3000-trial estimates: SE of their difference <= 0.013.
        assert design_power(0.70, 0.70 + gap, n, seed=n) == pytest.approx(power, abs=0.035)


def test_power_is_the_threshold_rate_when_there_is_no_gap():
    # With no true gap, P(B > A) is roughly uniform across evals: power ~ 1 - threshold.
    assert design_power(0.7, 0.7, 200, trials=4000, threshold=0.9) == pytest.approx(0.10, abs=0.03)


def test_sample_size_brackets_the_target():
    n = sample_size_for_power(0.7, 0.1, target_power=0.8, trials=2000)
    assert design_power(0.7, 0.8, n, trials=2000) >= 0.8
    assert design_power(0.7, 0.8, int(n * 0.9), trials=2000) < 0.8
    table = power_table(0.7, [0.1], [n])
    assert table.loc[0, "power"] >= 0.78
    with pytest.raises(ValueError, match="positive"):
        sample_size_for_power(0.7, -0.1)


def test_an_answer_between_the_last_doubling_and_max_n_is_found():
    """The doubling search stopped once it passed max_n: with the answer (~98 here) between 64 and
    max_n = 120 it said "more than 120" (976 and --max-n 1000 at a 0.05 gap)."""
    n = sample_size_for_power(0.7, 0.15, target_power=0.8, trials=1000)
    assert 64 < n < 120, n
    capped = sample_size_for_power(0.7, 0.15, target_power=0.8, trials=1000, max_n=120)
    assert capped is not None and abs(capped - n) <= 0.03 * n
    assert design_power(0.7, 0.85, capped, trials=1000) >= 0.8
    assert sample_size_for_power(0.7, 0.15, target_power=0.8, trials=1000, max_n=n // 2) is None
    with pytest.raises(ValueError, match="at least 1"):
        sample_size_for_power(0.7, 0.15, max_n=0)


def test_post_repeats_table_is_reproduced():
    # Post, section 5 (seed 21, 80 questions, PyMC): posterior SD 0.046, 0.035, 0.034, 0.026, 0.021, 0.018.
    table = repeats_versus_questions()
    assert table["posterior_sd"].tolist() == pytest.approx([0.046, 0.035, 0.034, 0.026, 0.021, 0.018], abs=0.0015)
    assert table["floor_se"].iloc[0] == pytest.approx(0.018, abs=5e-4)


def test_analytic_standard_error_limits():
    # K = 1: plain binomial SD sqrt(mu (1 - mu) / n); K -> infinity: the floor.
    assert analytic_standard_error(0.75, 6, 80, 1) == pytest.approx((0.75 * 0.25 / 80) ** 0.5)
    assert analytic_standard_error(0.75, 6, 80, 10**9) == pytest.approx(floor_standard_error(0.75, 6, 80), rel=1e-6)


def _parser():
    parser = argparse.ArgumentParser(prog="evalpipeline")
    add_plan_subcommand(parser.add_subparsers(dest="command", required=True))
    return parser


def test_plan_cli_prints_tables(capsys):
    args = _parser().parse_args(
        ["plan", "power", "--baseline", "0.7", "--gap", "0.05", "--n", "100", "400", "--trials", "500"]
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "power" in out and "400" in out
    args = _parser().parse_args(["plan", "repeats", "--questions", "40", "--repeats", "1", "5"])
    assert args.handler(args) == 0
    assert "floor_se" in capsys.readouterr().out
    args = _parser().parse_args(["plan", "sample-size", "--baseline", "0.7", "--gap", "0.1", "--trials", "500"])
    assert args.handler(args) == 0
    assert "questions per model" in capsys.readouterr().out


def test_plan_cli_draws_the_power_curves(capsys, tmp_path):
    from PIL import Image

    plot = tmp_path / "power.png"
    args = _parser().parse_args(
        [
            "plan",
            "power",
            "--baseline",
            "0.7",
            "--gap",
            "0.05",
            "--gap",
            "0.1",
            "--n",
            "50",
            "200",
            "800",
            "--trials",
            "300",
            "--plot",
            str(plot),
        ]
    )
    assert args.handler(args) == 0
    assert f"power curves: {plot}" in capsys.readouterr().out
    with Image.open(plot) as image:
        assert image.format == "PNG" and image.width > 300


def test_plan_cli_rejects_bad_input(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["plan", "power", "--baseline", "1.5", "--gap", "0.05"])
    args = _parser().parse_args(["plan", "power", "--baseline", "0.9", "--gap", "0.2"])
    assert args.handler(args) == 2
    assert "inside (0, 1)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["power", "--baseline", "0.7", "--gap", "0.05", "--n", "100", "--trials", "100000000000"],
            "argument --trials: must be from 1 to 1,000,000",
        ),  # was a MemoryError traceback (745 GiB)
        (
            ["power", "--baseline", "0.7", "--gap", "0.05", "--n", "100000000000000000000"],
            "argument --n: must be from 1 to 10,000,000",
        ),  # was an OverflowError traceback
        (["repeats", "--questions", "100000000000"], "argument --questions: must be from 1 to 1,000,000"),
        (["repeats", "--questions", "-5"], "argument --questions: must be from 1"),  # was numpy's "negative dimensions"
        (["repeats", "--repeats", "-1", "2"], "argument --repeats: must be from 1 to 10,000, got -1"),
        (["repeats", "--concentration", "nan"], "argument --concentration: must be a finite number"),
        (["repeats", "--concentration", "0"], "argument --concentration: must be positive"),
        (["sample-size", "--baseline", "0.7", "--gap", "0.05", "--max-n", "-3"], "argument --max-n: must be from 1"),
        (["sample-size", "--baseline", "0.7", "--gap", "0.05", "--trials", "0"], "argument --trials: must be from 1"),
        (["power", "--baseline", "0.7", "--gap", "nan", "--n", "100"], "argument --gap: must be a finite number"),
        # a negative seed was numpy's "expected non-negative integer", naming no option, from the simulation
        (
            ["power", "--baseline", "0.7", "--gap", "0.05", "--seed", "-1"],
            "argument --seed: must be a whole number >= 0, got -1",
        ),
        (
            ["sample-size", "--baseline", "0.7", "--gap", "0.05", "--seed", "-2"],
            "argument --seed: must be a whole number >= 0",
        ),
        (["repeats", "--seed", "-3"], "argument --seed: must be a whole number >= 0, got -3"),
        (["repeats", "--seed", "x"], "argument --seed: must be a whole number, got 'x'"),
    ],
)
def test_plan_cli_names_the_option_and_its_range(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["plan", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_plan_cli_refuses_a_folder_that_takes_no_file_before_simulating(capsys):
    # /proc takes no new file, even from root: the error named a temporary file, after the simulation
    args = _parser().parse_args(
        ["plan", "power", "--baseline", "0.7", "--gap", "0.05", "--n", "50", "--trials", "50", "--plot", "/proc/p.png"]
    )
    assert args.handler(args) == 2
    error = capsys.readouterr().err
    assert "--plot /proc/p.png: cannot write a file in /proc (" in error and ".tmp" not in error, error


@pytest.mark.parametrize("target", ["{tmp}", "{tmp}/missing/p.png", "{tmp}/p.jpg"])
def test_plan_cli_refuses_a_plot_path_it_cannot_write_as_named(target, capsys, tmp_path):
    # a folder was an IsADirectoryError traceback; a missing folder was created; a .jpg got PNG bytes
    plot = target.format(tmp=tmp_path)
    args = _parser().parse_args(
        ["plan", "power", "--baseline", "0.7", "--gap", "0.05", "--n", "50", "--trials", "50", "--plot", plot]
    )
    assert args.handler(args) == 2
    assert "need a .png file name in an existing folder" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists() and not (tmp_path / "p.jpg").exists()
