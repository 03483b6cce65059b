"""lm-evaluation-harness ``--log_samples`` output into canonical rows.

``lm_eval run ... --output_path OUT --log_samples`` writes, per model, a
folder ``OUT/<model_name_sanitized>/`` with (lm_eval 0.4.x,
``lm_eval/loggers/evaluation_tracker.py``):

* ``results_<ts>.json``: the aggregate (``results`` {task: {"acc,none": ...}},
  ``group_subtasks``, ``configs``, ``config`` {"model", "model_args", ...},
  ``model_name``, ``date`` (unix time the run started), ...). With an
  ``--output_path`` ending in ``.json`` it is ``<stem>_<ts>.json`` instead;
* ``samples_<task>_<ts>.jsonl``, one per task in ``configs``: one JSON object
  per (document, filter) with ``doc_id``, ``doc``, ``target``, ``filter``,
  ``metrics`` (the metric names) and one field per metric holding the
  document's value (built in ``lm_eval/evaluator.py``, ``evaluate``).

``<ts>`` is the harness's ``datetime.now().isoformat()`` with ``:`` as ``-``
(local time, e.g. ``2024-05-01T12-34-56.789012``); a results file and its
samples files share it. A results file is read with the samples files of
its own timestamp; a samples file given on its own is read with the results
file of its timestamp, which names the model (without it the file is an
error).

Mapping (one row per samples line):

* model: ``config.model_args``' ``peft`` / ``delta`` / ``pretrained`` /
  ``model`` / ``path`` / ``engine`` value (the harness's own order, from
  ``GeneralConfigTracker._get_model_name``), else ``model_name``, else
  ``config.model``; suite: the task; domain: the group whose
  ``group_subtasks`` list holds the task (None if none); item_id:
  ``str(doc_id)``; epoch: 1 (the harness scores all repeats of a document
  together); run_id: ``<ts>``; eval_id: ``lm-eval-<ts>``; created_at:
  ``date``, else ``<ts>`` read as UTC; log_path / log_sha256: the samples
  file (the file that holds the row); source_line: 1-based line number;
  sample_index: 0-based line index.
* scorer: ``<metric>`` for filter ``none``, else ``<metric>,<filter>`` (the
  harness's own ``metric,filter`` keys in ``results``). Which one is read:
  ``ScoreNormalisation.scorer`` (``--scorer``; a metric, optionally
  ``,filter``), else ``column_map["score"]`` (``--map score=...``), else
  the task's first metric in ``results`` (which is the first entry of the
  lines' ``metrics``), with filter ``none`` where the task has it, else the
  first filter. A metric given without a filter means ``none`` where the
  task has it, else its first filter.
* score: the chosen metric's value through the
  :class:`~evalpipeline.ingest.scores.ScoreNormalisation` (numbers in
  [0, 1], booleans); ``scores_json`` keeps every metric of the line, keyed
  by scorer name; ``metadata_json`` keeps the line's small fields
  (``filter``, the three hashes, ``target`` cut to 500 characters), never
  ``doc``, ``arguments`` or responses.
* target: the line's ``target`` (a number as text; a list of several as a
  JSON list); answer: the line's ``filtered_resps`` where that is one plain
  string (generate tasks: ``["4"]``), else null (multiple-choice tasks log
  log-likelihood pairs, no answer text). Both through
  :func:`~evalpipeline.ingest.base.label_text`.

Every line becomes a row (rows read = ingested + quarantined). Quarantined,
with the reason:

* lines of another filter than the chosen scorer's (generate tasks log one
  line per (document, filter)): not attempts of the chosen scorer;
* a missing metric field, or a value the normalisation does not accept
  (NaN, out of range, lists such as bleu's per-sample pairs);
* a line that is not JSON, not an object or has no ``doc_id`` (item_id
  ``line-<n>``);
* a later line with the same (doc_id, filter) as an earlier one (the first
  is kept).

File-level errors (:class:`SourceReadError`): an unreadable or invalid
results file, a samples file without its results file, a results file
without any samples file beside it (an aggregate-only run), an unreadable
samples file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd

from evalpipeline.ingest.base import (
    Chunk,
    IngestOptions,
    Source,
    SourcePartition,
    SourceReadError,
    label_text,
    sample_label,
    short_error,
)
from evalpipeline.ingest.scores import binary_reading
from evalpipeline.lake.keys import PartitionKeyError, to_partition_key
from evalpipeline.lake import sha256_file

LOG_FORMAT = "lm-eval"
#: ``config.model_args`` keys naming the model, in the harness's order (peft adapters before their base).
MODEL_ARG_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")
#: Keys of a samples line that are not metric values (for old files without a ``metrics`` list).
FIXED_LINE_KEYS = frozenset(
    {
        "doc_id",
        "doc",
        "target",
        "arguments",
        "resps",
        "filtered_resps",
        "filter",
        "metrics",
        "doc_hash",
        "prompt_hash",
        "target_hash",
    }
)
#: Keys of a ``results`` task entry that are not ``metric,filter`` values.
NON_METRIC_RESULT_KEYS = frozenset({"name", "alias", "sample_len", "sample_count"})
NO_FILTER = "none"
TARGET_CHARS = 500
_TS_FORMATS = ("%Y-%m-%dT%H-%M-%S.%f", "%Y-%m-%dT%H-%M-%S")
SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<ts>[^_]+)\.jsonl$")


@dataclass(frozen=True)
class LmEvalRun:
    """What a results file says about one run, and which samples files belong to it."""

    results_path: Path
    timestamp: str
    model: str
    created_at: datetime | None
    samples: Mapping[str, Path]  # task -> samples file, only tasks that have one
    domains: Mapping[str, str] = field(default_factory=dict)  # task -> group listing it
    scorers: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # task -> (metric, filter)s

    @property
    def run_id(self) -> str:
        return self.timestamp

    @property
    def eval_id(self) -> str:
        return f"lm-eval-{self.timestamp}"

    def source_id(self, task: str) -> str:
        return f"lm-eval-{task}-{self.timestamp}"


class LmEvalReader:
    """lm-evaluation-harness results + samples files (see the module docstring)."""

    name = LOG_FORMAT

    def partitions(self, source: Source, options: IngestOptions) -> list[SourcePartition]:
        run, tasks = _run_and_tasks(Path(source.path))
        return [SourcePartition(run.model, task, run.source_id(task)) for task in tasks]

    def read(self, source: Source, options: IngestOptions) -> Iterator[Chunk]:
        run, tasks = _run_and_tasks(Path(source.path))
        for task in tasks:
            yield from read_samples_file(run, task, options)


def scorer_name(metric: str, filter_name: str) -> str:
    """The canonical ``scorer`` of an lm-eval (metric, filter): the metric alone for filter ``none``."""
    return metric if filter_name == NO_FILTER else f"{metric},{filter_name}"


def read_run(results_path: Path | str) -> LmEvalRun:
    """Read a results file (never the samples files) and find its samples files beside it."""
    path = Path(results_path)
    timestamp = _timestamp_of(path, path.stem)
    try:
        with open(path, "rb") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise SourceReadError(path, f"cannot read lm-eval results file ({short_error(exc)})") from exc
    except ValueError as exc:
        raise SourceReadError(path, f"lm-eval results file is not valid JSON ({short_error(exc)})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise SourceReadError(path, "not an lm-eval results file: no 'results' object")
    model = model_of(data)
    if model is None:
        raise SourceReadError(path, "lm-eval results file names no model (config.model_args, model_name, config.model)")
    try:
        to_partition_key(model)
    except PartitionKeyError as exc:
        raise SourceReadError(path, f"model cannot be used as a partition key: {exc}") from exc
    results = data["results"]
    configs = data.get("configs") if isinstance(data.get("configs"), dict) else {}
    tasks = list(dict.fromkeys([*results, *configs]))
    samples = {}
    for task in tasks:
        candidate = path.parent / f"samples_{task}_{timestamp}.jsonl"
        if isinstance(task, str) and task and candidate.is_file():
            samples[task] = candidate
    domains: dict[str, str] = {}
    subtasks = data.get("group_subtasks") if isinstance(data.get("group_subtasks"), dict) else {}
    for group, members in subtasks.items():
        for member in members if isinstance(members, list) else []:
            if isinstance(member, str) and member != group:
                domains.setdefault(member, group)
    scorers = {task: tuple(_metric_keys(entry)) for task, entry in results.items() if isinstance(entry, dict)}
    return LmEvalRun(
        results_path=path,
        timestamp=timestamp,
        model=model,
        created_at=_created_at(data.get("date"), timestamp),
        samples=samples,
        domains=domains,
        scorers=scorers,
    )


def model_of(data: Mapping[str, Any]) -> str | None:
    """The model a results file names: model_args (harness order), else model_name, else config.model."""
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    args = _parse_model_args(config.get("model_args"))
    for key in MODEL_ARG_KEYS:
        value = args.get(key)
        if value not in (None, ""):
            return str(value)
    for value in (data.get("model_name"), config.get("model")):
        if isinstance(value, str) and value:
            return value
    return None


def read_samples_file(run: LmEvalRun, task: str, options: IngestOptions) -> Iterator[Chunk]:
    """Stream one task's samples file into chunks of ``options.chunk_rows`` rows."""
    path = run.samples[task]
    try:
        digest = sha256_file(path)
        handle = open(path, "rb")
    except OSError as exc:
        raise SourceReadError(path, f"cannot read lm-eval samples file ({short_error(exc)})") from exc
    choice = _ScorerChoice.make(options, run.scorers.get(task, ()), task)
    context = {
        "run_id": run.run_id,
        "eval_id": run.eval_id,
        "log_path": str(path),
        "log_sha256": digest,
        "log_format": LOG_FORMAT,
        "created_at": run.created_at,
    }
    domain = run.domains.get(task)
    source_id = run.source_id(task)
    first_line: dict[tuple[str, str], int] = {}
    rows: list[dict] = []
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                row = _line_row(raw, number, context, domain, choice, options)
                _check_duplicate(row, first_line)
                rows.append(row)
                if len(rows) >= max(1, options.chunk_rows):
                    yield Chunk(run.model, task, source_id, _frame(rows))
                    rows = []
        except OSError as exc:
            raise SourceReadError(path, f"cannot read lm-eval samples file ({short_error(exc)})") from exc
    if rows:
        yield Chunk(run.model, task, source_id, _frame(rows))


# -- the run and its files ------------------------------------------------------------


def _run_and_tasks(path: Path) -> tuple[LmEvalRun, list[str]]:
    """The run a source belongs to, and the tasks to read from it."""
    match = SAMPLES_NAME.match(path.name)
    if match:
        task, timestamp = match.group("task"), match.group("ts")
        results = _results_beside(path, timestamp)
        if results is None:
            raise SourceReadError(
                path,
                f"no lm-eval results file with timestamp {timestamp!r} beside this samples file "
                f"(results_{timestamp}.json); the results file is needed for the model name",
            )
        run = read_run(results)
        run = LmEvalRun(
            run.results_path, run.timestamp, run.model, run.created_at, {task: path}, run.domains, run.scorers
        )
        tasks = [task]
    elif path.suffix.lower() == ".jsonl":
        raise SourceReadError(path, "not an lm-eval samples file name (expected samples_<task>_<timestamp>.jsonl)")
    else:
        run = read_run(path)
        tasks = list(run.samples)
        if not tasks:
            raise SourceReadError(
                path,
                f"no samples_<task>_{run.timestamp}.jsonl beside it (an aggregate-only run has no per-sample "
                "rows); run lm_eval with --log_samples",
            )
    # a task too long for a partition key is placed nowhere: ingest keeps its rows under unplaced/
    return run, tasks


def _timestamp_of(path: Path, stem: str) -> str:
    if "_" not in stem or not stem.rsplit("_", 1)[1]:
        raise SourceReadError(
            path,
            "file name has no _<timestamp> suffix: lm-eval names its files results_<timestamp>.json and "
            "samples_<task>_<timestamp>.jsonl, and the timestamp ties them together",
        )
    return stem.rsplit("_", 1)[1]


def results_file_for(samples: Path | str) -> Path | None:
    """The results file a ``samples_<task>_<ts>.jsonl`` belongs to (same folder, same ``<ts>``), if any."""
    samples = Path(samples)
    match = SAMPLES_NAME.match(samples.name)
    return _results_beside(samples, match.group("ts")) if match else None


def _results_beside(samples: Path, timestamp: str) -> Path | None:
    named = samples.parent / f"results_{timestamp}.json"
    if named.is_file():
        return named
    for candidate in sorted(samples.parent.glob(f"*_{timestamp}.json")):  # --output_path NAME.json runs
        if candidate.is_file() and _starts_with_results_key(candidate):
            return candidate
    return None


def _starts_with_results_key(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return re.match(rb'^\s*\{\s*"results"', head) is not None


def _parse_model_args(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    if not isinstance(args, str):
        return {}
    parsed = {}
    for part in args.split(","):
        key, sep, value = part.partition("=")
        if sep:
            parsed.setdefault(key.strip(), value.strip())
    return parsed


def _metric_keys(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(metric, filter) pairs of a results task entry, in order, without the stderr keys."""
    keys = []
    for key in entry:
        if key in NON_METRIC_RESULT_KEYS or not isinstance(key, str) or "," not in key:
            continue
        metric, _, filter_name = key.partition(",")
        if metric.endswith("_stderr"):
            continue
        keys.append((metric, filter_name))
    return keys


def _created_at(date: Any, timestamp: str) -> datetime | None:
    if isinstance(date, (int, float)) and not isinstance(date, bool) and math.isfinite(date):
        try:
            return datetime.fromtimestamp(float(date), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            pass
    if isinstance(date, str) and date:
        try:
            return datetime.fromtimestamp(float(date), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            try:
                stamp = datetime.fromisoformat(date)
                return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
            except ValueError:
                pass
    for fmt in _TS_FORMATS:  # the harness's local time; the zone is not recorded
        try:
            return datetime.strptime(timestamp, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


# -- scorer choice ----------------------------------------------------------------------


@dataclass
class _ScorerChoice:
    """The (metric, filter) to read; settled from the results file, or from the first line."""

    metric: str | None
    filter: str | None
    known: tuple[tuple[str, str], ...]
    task: str

    @classmethod
    def make(cls, options: IngestOptions, known: tuple[tuple[str, str], ...], task: str) -> "_ScorerChoice":
        requested = options.normalisation.scorer or options.column_map.get("score")
        if requested:
            metric, sep, filter_name = requested.partition(",")
            if not sep:
                filters = [f for m, f in known if m == metric]
                filter_name = NO_FILTER if NO_FILTER in filters or not filters else filters[0]
            return cls(metric, filter_name, known, task)
        if known:
            metric = known[0][0]
            filters = [f for m, f in known if m == metric]
            return cls(metric, NO_FILTER if NO_FILTER in filters else filters[0], known, task)
        return cls(None, None, known, task)  # settled by the first line that names its metrics

    def settle(self, metrics: list[str], filter_name: str) -> None:
        if self.metric is None and metrics:
            self.metric, self.filter = metrics[0], filter_name

    @property
    def name(self) -> str | None:
        return None if self.metric is None else scorer_name(self.metric, self.filter)

    @property
    def missing_from_task(self) -> bool:
        return bool(self.known) and self.metric is not None and (self.metric, self.filter) not in self.known


# -- rows -------------------------------------------------------------------------------


def _line_row(
    raw: bytes, number: int, context: dict, domain: str | None, choice: _ScorerChoice, options: IngestOptions
) -> dict:
    try:
        line = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        detail = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else short_error(exc)
        return _bad_line_row(number, context, domain, f"line {number} is not valid JSON ({detail})")
    if not isinstance(line, dict):
        return _bad_line_row(number, context, domain, f"line {number} is not a JSON object (a {type(line).__name__})")
    doc_id = line.get("doc_id")
    if doc_id is None or isinstance(doc_id, (dict, list)):
        return _bad_line_row(number, context, domain, f"line {number} has no doc_id")
    item_id = str(doc_id)
    label = sample_label(item_id, 1)
    filter_name = line.get("filter") if isinstance(line.get("filter"), str) else NO_FILTER
    metrics = line.get("metrics")
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        metrics = [k for k in line if k not in FIXED_LINE_KEYS]
    choice.settle(metrics, filter_name)
    row = _base_row(number, context, domain)
    row.update(
        item_id=item_id,
        answer=_filtered_answer(line.get("filtered_resps")),
        target=label_text(line.get("target")),
        scores_json=_json({scorer_name(m, filter_name): line[m] for m in metrics if m in line}) if metrics else None,
        metadata_json=_json(_small_fields(line, filter_name)),
    )
    row["_filter"] = filter_name
    if choice.missing_from_task:
        scorers = ", ".join(scorer_name(m, f) for m, f in choice.known)
        row["reason"] = (
            f"{label}: task {choice.task!r} has no scorer {choice.name!r} (scorers: {scorers}; choose with --scorer)"
        )
    elif choice.metric is None:
        row["reason"] = f"{label}: line {number} names no metrics"
    elif filter_name != choice.filter:
        row["reason"] = f"{label}: scorer {scorer_name(choice.metric, filter_name)!r} not chosen (choose with --scorer)"
    elif choice.metric not in line:
        row["reason"] = (
            f"{label}: line {number} (doc_id {item_id}) has no value for metric {choice.metric!r} (metrics: {metrics})"
        )
    else:
        outcome = options.normalisation.normalise(line[choice.metric])
        row.update(scorer=choice.name, score=outcome.score, score_raw=outcome.raw)
        row["correct"] = binary_reading(outcome.score)
        if outcome.reason:
            row["reason"] = f"{label}: {outcome.reason}"
    return row


def _check_duplicate(row: dict, first_line: dict[tuple[str, str], int]) -> None:
    """Keep the first (doc_id, filter) of a file; quarantine later lines naming the first's line."""
    filter_name = row.pop("_filter", None)
    if filter_name is None:
        return
    key = (row["item_id"], filter_name)
    if key in first_line:
        row.update(scorer=None, score=None, correct=None, score_raw=None)
        row["reason"] = (
            f"duplicate (item_id {key[0]!r}, epoch 1) in the log: doc_id {key[0]} with filter {filter_name!r} "
            f"is also on line {first_line[key]}, which is kept"
        )
    else:
        first_line[key] = row["source_line"]


def _base_row(number: int, context: dict, domain: str | None) -> dict:
    return {
        "domain": domain,
        "subdomain": None,
        "item_id": None,
        "epoch": 1,
        "scorer": None,
        "score": None,
        "correct": None,
        "score_raw": None,
        "answer": None,
        "target": None,
        "cluster": None,
        "error": None,
        "limit": None,
        "metadata_json": None,
        "scores_json": None,
        "run_id": context["run_id"],
        "eval_id": context["eval_id"],
        "log_path": context["log_path"],
        "log_sha256": context["log_sha256"],
        "log_format": context["log_format"],
        "sample_index": number - 1,
        "source_line": number,
        "created_at": context["created_at"],
        "reason": None,
    }


def _bad_line_row(number: int, context: dict, domain: str | None, problem: str) -> dict:
    row = _base_row(number, context, domain)
    row["item_id"] = f"line-{number}"
    row["reason"] = f"{sample_label(row['item_id'], 1)}: {problem}"
    return row


def _filtered_answer(filtered: Any) -> str | None:
    """The answer text of a line's ``filtered_resps``: a string, or a list holding one string (one
    request per document, as generate tasks log it); None otherwise."""
    if isinstance(filtered, list) and len(filtered) == 1:
        filtered = filtered[0]
    return label_text(filtered) if isinstance(filtered, str) else None


def _small_fields(line: Mapping[str, Any], filter_name: str) -> dict:
    small: dict[str, Any] = {"filter": filter_name}
    for key in ("doc_hash", "prompt_hash", "target_hash"):
        if isinstance(line.get(key), str):
            small[key] = line[key]
    target = line.get("target")
    if target is not None:
        text = target if isinstance(target, str) else _json(target)
        small["target"] = text if len(text) <= TARGET_CHARS else text[:TARGET_CHARS] + "..."
    return small


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)
