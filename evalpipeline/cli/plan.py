"""``evalpipeline plan ...``: planning an eval from the command line (no lake needed).

    evalpipeline plan power --baseline 0.7 --gap 0.05 [--gap 0.025] --n 100 200 400 [--threshold 0.95] [--plot FILE.png]
    evalpipeline plan sample-size --baseline 0.7 --gap 0.05 [--power 0.8] [--threshold 0.95]
    evalpipeline plan repeats [--questions 80] [--repeats 1 2 3 5 10 30] [--mean 0.75] [--concentration 6]

See :mod:`evalpipeline.stats.planning` (the post's sections 5 and 6).
"""

from __future__ import annotations

import argparse
import sys
import tempfile


def _rate(text: str) -> float:
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _count(largest: int):
    """A whole number from 1 to ``largest``: beyond it the simulation's arrays would not fit in memory
    (``--trials 1e11`` asked numpy for 745 GiB)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not 1 <= value <= largest:
            raise argparse.ArgumentTypeError(f"must be from 1 to {largest:,}, got {text}")
        return value

    parse.__name__ = "count"
    return parse


def _seed(text: str) -> int:
    """A whole number >= 0: numpy's generators refuse a negative seed with a message naming no option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return value


#: Upper bounds of the simulation sizes (each well beyond what a plan needs)
MAX_TRIALS, MAX_QUESTIONS, MAX_REPEATS = 1_000_000, 10_000_000, 10_000


def add_plan_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``plan`` and its sub-commands; each sets ``handler`` (call ``args.handler(args)``)."""
    plan = subparsers.add_parser("plan", help="power, sample size and repeats-versus-questions for planning an eval")
    commands = plan.add_subparsers(dest="plan_command", required=True)

    power = commands.add_parser("power", help="P(reaching the decision bar) by simulation, per gap and eval size")
    power.add_argument("--baseline", type=_rate, required=True, help="accuracy of the current model, e.g. 0.7")
    power.add_argument(
        "--gap", type=_number, action="append", required=True, help="true improvement to detect (repeatable)"
    )
    power.add_argument(
        "--n",
        type=_count(MAX_QUESTIONS),
        nargs="+",
        default=[100, 200, 400, 800, 1600, 3200],
        help="questions per model",
    )
    power.add_argument("--threshold", type=_rate, default=0.95, help="decision bar on P(B > A) (default 0.95)")
    power.add_argument(
        "--trials", type=_count(MAX_TRIALS), default=3000, help="simulated evals per cell (default 3000)"
    )
    power.add_argument("--seed", type=_seed, default=0)
    power.add_argument("--plot", metavar="FILE.png", help="also draw the power curves (power against n per gap) here")
    power.set_defaults(handler=_power)

    size = commands.add_parser("sample-size", help="smallest eval reaching a target power")
    size.add_argument("--baseline", type=_rate, required=True)
    size.add_argument("--gap", type=_positive, required=True)
    size.add_argument("--power", type=_rate, default=0.8, help="target power (default 0.8)")
    size.add_argument("--threshold", type=_rate, default=0.95)
    size.add_argument("--trials", type=_count(MAX_TRIALS), default=2000)
    size.add_argument("--max-n", type=_count(MAX_QUESTIONS), default=100_000)
    size.add_argument("--seed", type=_seed, default=0)
    size.set_defaults(handler=_sample_size)

    repeats = commands.add_parser("repeats", help="uncertainty of the overall accuracy as each question is re-asked")
    repeats.add_argument(
        "--questions", type=_count(MAX_QUESTIONS // 10), default=80, help="distinct questions (default 80)"
    )
    repeats.add_argument("--repeats", type=_count(MAX_REPEATS), nargs="+", default=[1, 2, 3, 5, 10, 30])
    repeats.add_argument("--mean", type=_rate, default=0.75, help="planted mean accuracy (default 0.75)")
    repeats.add_argument(
        "--concentration", type=_positive, default=6.0, help="planted question concentration (default 6)"
    )
    repeats.add_argument("--seed", type=_seed, default=21)
    repeats.set_defaults(handler=_repeats)
    return plan


def _run(function, args) -> int:
    try:
        table = function(args)
    except (ValueError, OSError, MemoryError, OverflowError) as exc:  # OSError: --plot cannot be written
        print(f"evalpipeline plan {args.plan_command}: {exc or type(exc).__name__}", file=sys.stderr)
        return 2
    print(table)
    return 0


def _power(args) -> int:
    from evalpipeline.stats.planning import power_table

    def build(args):
        if args.plot:  # before the simulation, and without creating folders: a typo should not make one
            from pathlib import Path

            plot = Path(args.plot)
            if plot.suffix.lower() != ".png" or not plot.parent.is_dir() or plot.is_dir():
                raise ValueError(f"--plot {args.plot}: need a .png file name in an existing folder")
            try:  # a folder that takes no file was otherwise found after the simulation, naming a temporary file
                with tempfile.TemporaryFile(dir=plot.parent):
                    pass
            except OSError as exc:
                raise ValueError(
                    f"--plot {args.plot}: cannot write a file in {plot.parent} ({exc.strerror or type(exc).__name__})"
                ) from exc
        for gap in args.gap:
            if not 0 < args.baseline + gap < 1:
                raise ValueError(f"baseline + gap must stay inside (0, 1), got {args.baseline} + {gap}")
        table = power_table(
            args.baseline, args.gap, args.n, threshold=args.threshold, trials=args.trials, seed=args.seed
        )
        text = table[["baseline", "gap", "n_questions", "threshold", "power", "power_se"]].to_string(
            index=False, float_format="%.3f"
        )
        if args.plot:
            from evalpipeline.plots import power_curve, save_png

            curves = table.rename(columns={"n_questions": "n"})[["gap", "n", "power"]].assign(
                power_low=(table["power"] - 1.96 * table["power_se"]).clip(0, 1),
                power_high=(table["power"] + 1.96 * table["power_se"]).clip(0, 1),
            )
            save_png(
                power_curve(curves, log_x=True, title=f"baseline {args.baseline}: P(B > A) >= {args.threshold}"),
                args.plot,
            )
            text += f"\npower curves: {args.plot}"
        return text

    return _run(build, args)


def _sample_size(args) -> int:
    from evalpipeline.stats.planning import sample_size_for_power

    def build(args):
        n = sample_size_for_power(
            args.baseline,
            args.gap,
            target_power=args.power,
            threshold=args.threshold,
            trials=args.trials,
            max_n=args.max_n,
            seed=args.seed,
        )
        answer = f"more than {args.max_n}" if n is None else str(n)
        return (
            f"baseline {args.baseline}, gap {args.gap}, bar P(B > A) >= {args.threshold}, target power {args.power}: "
            f"{answer} questions per model (unpaired design)"
        )

    return _run(build, args)


def _repeats(args) -> int:
    from evalpipeline.stats.planning import repeats_versus_questions

    def build(args):
        table = repeats_versus_questions(
            args.questions, args.repeats, mean=args.mean, concentration=args.concentration, seed=args.seed
        )
        return table.to_string(index=False, float_format="%.4f")

    return _run(build, args)
