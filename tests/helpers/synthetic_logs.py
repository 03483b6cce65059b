"""Large but valid Inspect logs, written quickly for streaming tests and benchmarks.

Running ``inspect_ai.eval`` on 200k samples would take many minutes, so
inspect_ai runs only once, on a two-sample task (:func:`make_template`): the
log it writes is the template. :func:`write_synthetic_log` then writes an
N-sample log member by member with the template's structure:

* ``.eval``: the zip members inspect_ai's recorder writes (``_journal/start.json``,
  ``samples/<id>_epoch_<n>.json``, ``_journal/summaries/<k>.json``,
  ``summaries.json``, ``reductions.json``, ``header.json``), zstd-compressed
  like inspect_ai's own (through inspect_ai's zstd support for ``zipfile``,
  with one reused compressor instead of a new multi-threaded one per member,
  which is what makes 200k members take seconds instead of minutes);
* ``.json``: the single JSON document, samples in inspect_ai's sort order.

Samples and summaries are the template's with the per-sample fields
replaced (id, epoch, uuid, input, metadata, scores, error), so everything
else is exactly what inspect_ai wrote. Every sample is a pure function of
its position: the same arguments give the same log, and :func:`expected_row`
says what any sample holds without reading the log back. Nothing is held
for all samples while writing (``summaries.json``, which follows the sample
members in the zip, waits in a temporary file).

The result reads back with inspect_ai's own readers
(``read_eval_log_sample_summaries``, ``analysis.samples_df``,
``read_eval_log_sample`` / ``read_eval_log``); ``tests/test_inspect_streaming.py``
checks it.

Command line (for the benchmark and by hand)::

    .venv/bin/python -m tests.helpers.synthetic_logs OUT.eval 200000
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

TEMPLATE_MODEL = "mockllm/synthetic-model"
TEMPLATE_SUITE = "synthetic_suite"
SCORER = "grade"
DOMAINS = ("algebra", "geometry", "reading", "coding")
#: every ERROR_EVERY-th sample (1-based position) is errored: no score, ``error`` set
ERROR_EVERY = 997
#: every PARTIAL_EVERY-th sample is scored "P" (partial credit, 0.5 by default)
PARTIAL_EVERY = 53
#: samples per journal summary member (inspect_ai flushes its buffer in batches)
JOURNAL_BATCH = 1000


@dataclass
class Template:
    """The parsed members of the one real log inspect_ai wrote."""

    header: dict
    start: dict
    sample: dict  # a scored sample
    errored_sample: dict  # a sample whose solver raised
    summary: dict
    errored_summary: dict
    source: Path = field(default=Path())


def make_template(log_dir: Path | str) -> Template:
    """Run a two-sample offline Inspect eval (one scored, one errored) and parse its log."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score, accuracy, scorer
    from inspect_ai.solver import solver

    @solver
    def answer():
        async def solve(state, generate):  # never calls generate: offline
            if state.sample_id == "t1":
                raise RuntimeError("planted failure on t1")
            state.output = ModelOutput.from_content(model="mockllm/model", content="C")
            return state

        return solve

    @scorer(metrics=[accuracy()], name=SCORER)
    def grade():
        async def score(state, target):
            return Score(value=state.output.completion, answer=state.output.completion)

        return score

    dataset = MemoryDataset(
        [
            Sample(id=f"t{i}", input=f"question t{i}", target="C", metadata={"domain": "d", "subdomain": "s"})
            for i in (0, 1)
        ]
    )
    task = Task(dataset=dataset, solver=answer(), scorer=grade(), name=TEMPLATE_SUITE)
    logs = inspect_eval(
        task, model=TEMPLATE_MODEL, log_dir=str(log_dir), log_format="eval", display="none", fail_on_error=False
    )
    path = Path(logs[0].location)
    with zipfile.ZipFile(path) as zf:
        summaries = {s["id"]: s for s in json.loads(zf.read("summaries.json"))}
        return Template(
            header=json.loads(zf.read("header.json")),
            start=json.loads(zf.read("_journal/start.json")),
            sample=json.loads(zf.read("samples/t0_epoch_1.json")),
            errored_sample=json.loads(zf.read("samples/t1_epoch_1.json")),
            summary=summaries["t0"],
            errored_summary=summaries["t1"],
            source=path,
        )


# -- what each sample holds ------------------------------------------------------------


def item_id(k: int) -> str:
    return f"item-{k:07d}"


def positions(n_samples: int, epochs: int) -> Iterator[tuple[int, int, int]]:
    """``(position, item number, epoch)`` in log order: epoch-major, like inspect_ai's sort."""
    items = n_samples // epochs
    position = 0
    for epoch in range(1, epochs + 1):
        for k in range(items):
            yield position, k, epoch
            position += 1


def expected_row(position: int, k: int, epoch: int) -> dict:
    """What sample ``position`` (item ``k``, ``epoch``) holds: score value (None if errored), metadata, error."""
    errored = (position + 1) % ERROR_EVERY == 0
    if errored:
        value = None
    elif (position + 1) % PARTIAL_EVERY == 0:
        value = "P"
    else:
        value = "C" if (k * 7 + epoch * 3) % 10 < 7 else "I"
    domain = DOMAINS[k % len(DOMAINS)]
    return {
        "item_id": item_id(k),
        "epoch": epoch,
        "value": value,
        "error": f"RuntimeError('planted failure on {item_id(k)}')" if errored else None,
        "metadata": {
            "domain": domain,
            "subdomain": f"{domain}-{k % 13}",
            "difficulty": round((k % 10) / 10, 1),
            "source": "synthetic",
        },
    }


def _input_text(k: int, input_chars: int) -> str:
    head = f"Question {k}: "
    filler = "Consider the following problem statement carefully and answer with one letter. "
    body = (filler * (input_chars // len(filler) + 1))[: max(0, input_chars - len(head))]
    return head + body


def _uuid(position: int, epoch: int) -> str:
    return f"syn{epoch:03d}{position:016d}"


_FIELD = re.compile(r'"@@(\w+)@@"')


class _Encoder:
    """A template record serialised once, with ``"@@name@@"`` where per-sample values go.

    Filling it costs a few small ``json.dumps`` instead of encoding the
    whole record (events and all) for every sample.
    """

    def __init__(self, record: dict, fields: dict[str, Any]):
        record = dict(record)
        for key, value in fields.items():
            record[key] = value
        pieces = _FIELD.split(json.dumps(record, separators=(",", ":")))
        self.literals = [p.encode() for p in pieces[0::2]]
        self.names = pieces[1::2]

    def encode(self, encoded: dict[str, bytes]) -> bytes:
        out = [self.literals[0]]
        for name, literal in zip(self.names, self.literals[1:]):
            out.append(encoded[name])
            out.append(literal)
        return b"".join(out)


class _Records:
    """Encodes sample ``position`` as its sample member and its summary."""

    def __init__(self, template: Template, input_chars: int):
        self.input_chars = input_chars
        common = {k: f"@@{k}@@" for k in ("id", "epoch", "input", "target", "metadata", "scores", "uuid")}
        self.samples = {}
        self.summaries = {}
        for errored, sample, summary in (
            (False, template.sample, template.summary),
            (True, template.errored_sample, template.errored_summary),
        ):
            fields = dict(common)
            messages = [dict(m) for m in sample.get("messages", [])]
            if messages:
                messages[0]["content"] = "@@input@@"
            fields["messages"] = messages
            if errored:
                fields["error"] = dict(sample["error"], message="@@error@@")
            self.samples[errored] = _Encoder(sample, fields)
            self.summaries[errored] = _Encoder(summary, dict(common, error="@@error@@") if errored else common)

    def encode(self, position: int, k: int, epoch: int) -> tuple[str, bytes, bytes]:
        """The sample member's name, the sample's JSON and the summary's JSON."""
        row = expected_row(position, k, epoch)
        errored = row["error"] is not None
        values = {
            "id": row["item_id"],
            "epoch": epoch,
            "input": _input_text(k, self.input_chars),
            "target": "C",
            "metadata": row["metadata"],
            "scores": {} if errored else {SCORER: {"value": row["value"], "answer": row["value"], "history": []}},
            "uuid": _uuid(position, epoch),
            "error": row["error"],
        }
        encoded = {name: _ENCODER.encode(value).encode() for name, value in values.items()}
        return (
            f"samples/{row['item_id']}_epoch_{epoch}.json",
            self.samples[errored].encode(encoded),
            self.summaries[errored].encode(encoded),
        )


# -- writing ---------------------------------------------------------------------------


def log_file_name(n_samples: int, fmt: str, *, epochs: int = 1, suite: str = TEMPLATE_SUITE) -> str:
    """A file name as inspect_ai gives its logs (``<timestamp>_<task>_<id>.<fmt>``).

    inspect_ai's log listing (``samples_df`` on a path, ``list_eval_logs``)
    skips ``.json`` files whose name does not start with such a timestamp.
    """
    return f"2026-01-01T00-00-00+00-00_{suite.replace('_', '-')}_synthetic{n_samples}x{epochs}.{fmt}"


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def _header(
    template: Template, n_samples: int, epochs: int, *, eval_id: str, model: str, suite: str, status: str
) -> dict:
    header = json.loads(json.dumps(template.header))  # a deep copy
    spec = header["eval"]
    items = n_samples // epochs
    spec.update(eval_id=eval_id, run_id=f"run-{eval_id}", task=suite, task_display_name=suite, model=model)
    spec["dataset"] = dict(spec.get("dataset") or {}, samples=items, sample_ids=[item_id(k) for k in range(items)])
    spec["config"] = dict(spec.get("config") or {}, epochs=epochs)
    header["status"] = status
    if status != "success":
        header.pop("results", None)
    else:
        scored, total = 0, 0.0
        for p, k, e in positions(n_samples, epochs):
            value = expected_row(p, k, e)["value"]
            if value is not None:
                scored += 1
                total += {"C": 1.0, "I": 0.0, "P": 0.5}[value]
        accuracy = total / max(1, scored)
        results = header["results"]
        results.update(total_samples=n_samples, completed_samples=scored)
        for score in results.get("scores", []):
            score.update(scored_samples=scored, unscored_samples=n_samples - scored)
            for metric in score.get("metrics", {}).values():
                metric["value"] = accuracy
    return header


@contextlib.contextmanager
def _fast_zstd():
    """inspect_ai's zstd compressor for ``zipfile``, reused across members.

    inspect_ai's patch builds a new 12-thread ``ZstdCompressor`` for every
    member (about 1 ms each); a single-threaded one reused is ~20 us. The
    bytes are ordinary zstd frames either way.
    """
    import zstandard
    from inspect_ai._util.zipfile import zipfile_compress_kwargs  # installs zstd support in zipfile

    method = zipfile_compress_kwargs["compression"]
    original = zipfile._get_compressor  # type: ignore[attr-defined]
    compressor = zstandard.ZstdCompressor(level=3)

    def reuse(compress_type, compresslevel=None):
        return compressor.compressobj() if compress_type == method else original(compress_type, compresslevel)

    zipfile._get_compressor = reuse  # type: ignore[attr-defined]
    try:
        yield method
    finally:
        zipfile._get_compressor = original  # type: ignore[attr-defined]


def write_synthetic_log(
    path: Path | str,
    n_samples: int,
    *,
    template: Template,
    epochs: int = 1,
    eval_id: str | None = None,
    model: str = TEMPLATE_MODEL,
    suite: str = TEMPLATE_SUITE,
    status: str = "success",
    input_chars: int = 200,
    sample_members: bool = True,
    summaries_json: bool = True,
    journal: bool = True,
) -> Path:
    """Write an ``n_samples`` Inspect log at ``path`` (``.eval`` or ``.json`` by suffix).

    ``epochs`` must divide ``n_samples``. ``.eval`` only: ``sample_members``
    (write ``samples/*.json``), ``summaries_json`` (the consolidated summary
    list) and ``journal`` (``_journal/summaries/<k>.json`` batches, as an
    in-progress log holds them) may be turned off to make odd logs.
    """
    path = Path(path)
    if n_samples % epochs:
        raise ValueError(f"epochs ({epochs}) must divide n_samples ({n_samples})")
    eval_id = eval_id or f"synthetic{n_samples}x{epochs}"
    header = _header(template, n_samples, epochs, eval_id=eval_id, model=model, suite=suite, status=status)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    if path.suffix == ".eval":
        _write_eval(tmp, header, template, n_samples, epochs, input_chars, sample_members, summaries_json, journal)
    elif path.suffix == ".json":
        _write_json(tmp, header, template, n_samples, epochs, input_chars)
    else:
        raise ValueError(f"expected a .eval or .json path, got {path}")
    tmp.replace(path)
    return path


def _reductions(n_samples: int, epochs: int) -> list:
    """One reduced score per item (the mean over epochs, as inspect_ai's default reducer)."""
    value = {"C": 1.0, "I": 0.0, "P": 0.5}
    per_item: dict[int, list[float]] = {}
    for position, k, epoch in positions(n_samples, epochs):
        v = expected_row(position, k, epoch)["value"]
        per_item.setdefault(k, []).append(0.0 if v is None else value[v])
    return [
        {
            "scorer": SCORER,
            "samples": [
                {"value": sum(vs) / len(vs), "history": [], "sample_id": item_id(k)} for k, vs in per_item.items()
            ],
        }
    ]


def _write_eval(tmp, header, template, n_samples, epochs, input_chars, sample_members, summaries_json, journal):
    start = dict(template.start, eval=header["eval"], plan=header["plan"])
    with _fast_zstd() as method, zipfile.ZipFile(tmp, "w", compression=method) as zf:
        zf.writestr("_journal/start.json", _dumps(start))
        records = _Records(template, input_chars)
        batch: list[bytes] = []
        batches = 0
        # summaries.json is written after the samples (one zip member at a time):
        # meanwhile its items wait in a temporary file, not in memory
        with tempfile.TemporaryFile() as pending:
            pending.write(b"[")
            for position, k, epoch in positions(n_samples, epochs):
                name, sample, summary = records.encode(position, k, epoch)
                if sample_members:
                    zf.writestr(name, sample)
                pending.write((b"," if position else b"") + summary)
                if journal:
                    batch.append(summary)
                    if len(batch) == JOURNAL_BATCH:
                        batches += 1
                        zf.writestr(f"_journal/summaries/{batches}.json", b"[" + b",".join(batch) + b"]")
                        batch = []
            pending.write(b"]")
            if journal and batch:
                batches += 1
                zf.writestr(f"_journal/summaries/{batches}.json", b"[" + b",".join(batch) + b"]")
            if summaries_json:
                pending.seek(0)
                with zf.open("summaries.json", "w", force_zip64=True) as out:
                    shutil.copyfileobj(pending, out, 1 << 20)
        zf.writestr("reductions.json", _dumps(_reductions(n_samples, epochs)))
        zf.writestr("header.json", _dumps(header))


def _write_json(tmp, header, template, n_samples, epochs, input_chars):
    with open(tmp, "wb") as out:
        head = _dumps(header)
        out.write(head[:-1])  # the header object without its closing brace
        out.write(b',"samples":[')
        records = _Records(template, input_chars)
        for position, k, epoch in positions(n_samples, epochs):
            out.write((b"," if position else b"") + records.encode(position, k, epoch)[1])
        out.write(b'],"reductions":' + _dumps(_reductions(n_samples, epochs)) + b"}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("n_samples", type=int)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        template = make_template(tmp)
    write_synthetic_log(args.out, args.n_samples, template=template, epochs=args.epochs)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
