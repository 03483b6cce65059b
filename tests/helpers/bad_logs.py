"""Hostile inputs for the ingest tests, built inside pytest's ``tmp_path``.

Real Inspect logs come from :func:`make_base_logs`, which runs a tiny offline
Inspect eval (the solver writes the answer itself, it never calls
``generate``) once per log format. Everything else is derived from those
real logs, either through Inspect's own API (:func:`derive`:
``read_eval_log`` -> edit -> ``write_eval_log``; a fresh ``eval_id`` each
time, so that every derived file is a distinct run) or by damaging the bytes
(:func:`truncate`, :func:`random_bytes`, :func:`json_syntax_error`,
:func:`empty_file`).

Nothing here writes outside the folders the caller passes in.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any, Callable

#: The model of the base logs. The ``/`` after the provider and the space are
#: deliberate: partition keys must encode them.
MODEL = "mockllm/acme/large model v2"
#: The suite (Inspect task name) of the base logs.
SUITE = "suite_base"
#: The one scorer of the base logs.
SCORER = "grade"
#: item id -> the letter grade the scorer gives it (in every epoch).
ITEMS = {"q1": "C", "q2": "I", "q3": "C"}
EPOCHS = 2
#: Samples per base log.
N_SAMPLES = len(ITEMS) * EPOCHS


def make_base_logs(log_dir: Path) -> dict[str, Path]:
    """Run one tiny offline Inspect eval per format; return ``{"eval": path, "json": path}``."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score, accuracy, scorer
    from inspect_ai.solver import solver

    @solver
    def answer():
        async def solve(state, generate):  # never calls generate: offline
            state.output = ModelOutput.from_content(model="mockllm/model", content=ITEMS[str(state.sample_id)])
            return state

        return solve

    @scorer(metrics=[accuracy()], name=SCORER)
    def grade():
        async def score(state, target):
            return Score(value=ITEMS[str(state.sample_id)])

        return score

    def task():
        samples = [
            Sample(id=item, input=f"question {item}", target="C", metadata={"domain": "d", "subdomain": "s"})
            for item in ITEMS
        ]
        return Task(dataset=MemoryDataset(samples), solver=answer(), scorer=grade(), name=SUITE)

    paths = {}
    for fmt in ("eval", "json"):
        out = Path(log_dir) / fmt
        logs = inspect_eval(
            task(),
            model=MODEL,
            epochs=EPOCHS,
            log_dir=str(out),
            log_format=fmt,
            display="none",
            fail_on_error=False,
        )
        assert logs[0].status == "success", logs[0].error
        paths[fmt] = Path(logs[0].location)
    return paths


# -- derived logs, through Inspect's own reader and writer ----------------------


def derive(
    base: Path,
    dest: Path,
    *,
    suite: str | None = None,
    model: str | None = None,
    status: str | None = None,
    created: str | None = None,
    eval_id: str | None = None,
    edit: Callable[[Any], None] | None = None,
) -> Path:
    """Copy the log ``base`` to ``dest`` (format from ``dest``'s suffix) with changes.

    The copy always gets a new ``eval_id`` (or the one given), so it is a run
    of its own; ``edit(log)`` may change anything else before it is written.
    """
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(base))
    log.eval.eval_id = eval_id or uuid.uuid4().hex[:22]
    if suite is not None:
        log.eval.task = suite
    if model is not None:
        log.eval.model = model
    if status is not None:
        log.status = status
    if created is not None:
        log.eval.created = created
    if edit is not None:
        edit(log)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(dest))
    return dest


def find_sample(log, item_id: str, epoch: int):
    for sample in log.samples:
        if str(sample.id) == item_id and sample.epoch == epoch:
            return sample
    raise KeyError((item_id, epoch))


def set_score(item_id: str, epoch: int, value: Any, scorer: str = SCORER) -> Callable[[Any], None]:
    """An ``edit`` that plants ``value`` as the score of one sample."""

    def edit(log):
        find_sample(log, item_id, epoch).scores[scorer].value = value

    return edit


def set_scores(*edits: Callable[[Any], None]) -> Callable[[Any], None]:
    """Several ``edit`` functions as one."""

    def edit(log):
        for one in edits:
            one(log)

    return edit


def replace_scores(item_id: str, epoch: int, scores: dict | None) -> Callable[[Any], None]:
    """An ``edit`` that replaces a sample's scores (``None`` or ``{}``: no score at all)."""

    def edit(log):
        find_sample(log, item_id, epoch).scores = scores

    return edit


def duplicate_sample(item_id: str, epoch: int) -> Callable[[Any], None]:
    """An ``edit`` that appends a second copy of one sample (JSON logs only: the
    ``.eval`` zip names sample files by id and epoch, so it cannot hold two)."""

    def edit(log):
        log.samples.append(find_sample(log, item_id, epoch).model_copy(deep=True))

    return edit


def remove_samples(log) -> None:
    """An ``edit`` that leaves a log without samples (as a crashed or empty run would)."""
    log.samples = []


# -- damaged bytes ---------------------------------------------------------------


def truncate(src: Path, dest: Path, fraction: float = 0.5) -> Path:
    """``dest``: the first ``fraction`` of ``src``'s bytes (an interrupted copy)."""
    data = Path(src).read_bytes()
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_bytes(data[: int(len(data) * fraction)])
    return Path(dest)


def random_bytes(dest: Path, size: int = 4096, seed: int = 0) -> Path:
    """``dest``: ``size`` seeded random bytes (not a zip, not JSON)."""
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_bytes(random.Random(seed).randbytes(size))
    return Path(dest)


def json_syntax_error(src: Path, dest: Path) -> Path:
    """``dest``: the JSON log ``src`` with a syntax error planted in its header
    (a doubled comma after the first key)."""
    text = Path(src).read_text()
    first_comma = text.index(",")
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_text(text[:first_comma] + ",," + text[first_comma + 1 :])
    return Path(dest)


def empty_file(dest: Path) -> Path:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_bytes(b"")
    return Path(dest)


def copy_file(src: Path, dest: Path) -> Path:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    Path(dest).write_bytes(Path(src).read_bytes())
    return Path(dest)


# -- reading back ----------------------------------------------------------------


def sample_keys(path: Path) -> list[tuple[str, int]]:
    """``(item_id, epoch)`` of every sample of a readable log, in log order."""
    from inspect_ai.log import read_eval_log_sample_summaries

    return [(str(s.id), int(s.epoch)) for s in read_eval_log_sample_summaries(str(path))]


def eval_id_of(path: Path) -> str:
    from inspect_ai.log import read_eval_log

    return read_eval_log(str(path), header_only=True).eval.eval_id


def files_under(root: Path) -> list[str]:
    """Every file below ``root``, relative, sorted (hidden temporaries included)."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def files_outside(root: Path, inside: Path) -> list[str]:
    """Files below ``root`` that are not below ``inside`` (to catch writes escaping the lake)."""
    root, inside = Path(root), Path(inside)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and inside not in p.parents)
