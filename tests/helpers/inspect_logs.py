"""Make real Inspect logs inside tests, with inspect_ai itself.

The solver sets the answer without calling ``generate`` (offline, calling
the mock model makes inspect_ai try to download a tokenizer).
"""

from __future__ import annotations

from pathlib import Path

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score, accuracy, scorer
from inspect_ai.solver import solver


@solver
def planted_answers(answers: dict, fail: set | None = None):
    """Answer each (sample id, epoch) with ``answers[(id, epoch)]``; raise for those in ``fail``."""

    async def solve(state, generate):
        if fail and (state.sample_id, state.epoch) in fail:
            raise RuntimeError(f"planted failure on {state.sample_id}")
        state.output = ModelOutput.from_content(
            model="mockllm/model", content=str(answers[(state.sample_id, state.epoch)])
        )
        return state

    return solve


@scorer(metrics=[accuracy()], name="exact")
def exact():
    """C when the answer equals the target, else I."""

    async def score(state, target):
        return Score(value="C" if state.output.completion == target.text else "I", answer=state.output.completion)

    return score


@scorer(metrics=[accuracy()], name="echo")
def echo():
    """The answer text itself as the score value (to plant any value)."""

    async def score(state, target):
        text = state.output.completion
        try:
            value = float(text)
        except ValueError:
            value = text
        return Score(value=value)

    return score


def make_log(
    log_dir: Path,
    *,
    model: str = "mockllm/test-model",
    suite: str = "unit_suite",
    items: int = 6,
    epochs: int = 1,
    answers: dict | None = None,
    fail: set | None = None,
    scorers=None,
    log_format: str = "eval",
) -> Path:
    """Run a small task with inspect_ai and return the log file's path.

    Items ``q0..q{items-1}`` alternate subdomains ``even`` / ``odd`` in domain
    ``unit``; the target is ``"yes"``. ``answers`` maps (id, epoch) to the
    answer (default ``"yes"`` for even items, ``"no"`` for odd).
    """
    ids = [f"q{i}" for i in range(items)]
    dataset = MemoryDataset(
        [
            Sample(
                id=i,
                input=f"question {i}",
                target="yes",
                metadata={"domain": "unit", "subdomain": ("even", "odd")[n % 2]},
            )
            for n, i in enumerate(ids)
        ]
    )
    answers = answers or {
        (i, e): ("yes" if n % 2 == 0 else "no") for n, i in enumerate(ids) for e in range(1, epochs + 1)
    }
    task = Task(dataset=dataset, solver=planted_answers(answers, fail), scorer=scorers or exact(), name=suite)
    logs = inspect_eval(
        task,
        model=model,
        epochs=epochs,
        log_dir=str(log_dir),
        log_format=log_format,
        display="none",
        fail_on_error=False,
    )
    return Path(logs[0].location)
