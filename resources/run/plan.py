"""What ``evalpipeline run`` runs, and in which ranges: plain functions of the landing folder's discovery,
what is stale, and the partitions' order. Nothing here opens an instance or executes a run.

A run of the loop has five stages -- the model x suite partitions, the suites, the suites'
comparisons, the models, the lake-wide tables -- each a list of :class:`Run`: one Dagster run over a
range of adjacent partitions (``assets/partitions.py``), so a run's cost is paid once a range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from dagster import MultiPartitionKey

from assets.jobs import (
    JOB_STEPS,
    comparison_job,
    ingest_and_fit_job,
    lake_job,
    model_job,
    model_profile_job,
    suite_job,
)
from assets.partitions import key_blocks, model_suite_partitions, range_blocks, split_failed_range
from assets.schedules import partition_run_selection
from evalpipeline.lake.keys import from_partition_key, printable, to_partition_key


class Run(NamedTuple):
    """One Dagster run of a stage: ``job`` over partition ``keys`` (None: the unpartitioned lake job),
    materialising ``assets`` (asset key strings; None: every asset of the job). ``label`` and ``names``
    are how the progress lines name it and its partitions."""

    job: str
    keys: list[str] | None
    label: str
    names: list[str]
    assets: tuple[str, ...] | None


@dataclass(frozen=True)
class RunScope:
    """What a run redoes: the model x suite ``pairs`` (display names), the ``suites``, the ``models``
    whose whole model stage runs, and the models (``profile_only``) whose profile alone is redone."""

    pairs: list[tuple[str, str]]
    suites: list[str]
    models: list[str]
    profile_only: list[str]


NO_STALE = {
    "pairs": set(),
    "suites": set(),
    "models": set(),
    "pair_assets": {},
    "rejected": {},
    "rejected_models": set(),
}


def run_scope(discovery, stale: dict, only_changed: bool, left: tuple[set[str], set[str]] = (set(), set())) -> RunScope:
    """Every partition, suite and model on a full run. With ``only_changed`` (the nightly): the new or
    changed partitions and the stale ones (:data:`NO_STALE` keys), the suites they feed and the stale
    ones, the models on those suites; a model without a rerun partition refreshes only its profile (its
    suites' ranks moved; its reliability has no new input). A partition the ingest retires, and
    ``left`` (suites, models that lost a partition to ``evalpipeline forget``), redo the suite and model
    they leave."""
    if not only_changed:
        return RunScope(sorted(discovery.partitions), sorted(discovery.suites), sorted(discovery.models), [])
    pairs = sorted(discovery.changed | stale["pairs"])
    retired_from = (
        ({s for _, s in discovery.retiring} | left[0]) & discovery.suites,
        ({m for m, _ in discovery.retiring} | left[1]) & discovery.models,
    )
    suites = sorted({s for _, s in pairs} | stale["suites"] | retired_from[0])
    models = sorted(
        ({m for m, s in discovery.partitions if s in suites} - stale["rejected_models"])
        | stale["models"]
        | retired_from[1]
    )
    profile_only = sorted(set(models) - {m for m, _ in pairs} - stale["models"] - retired_from[1])
    return RunScope(pairs, suites, [m for m in models if m not in profile_only], profile_only)


#: What a model's whole analysis (its reliability across suites, then its profile) costs in profiles
#: alone: a new-model night at 102 models took 2.0-2.4 s for the new model's run, 0.057-0.065 s a profile.
MODEL_ANALYSIS_IN_PROFILES = 35


def profile_shares(
    model_runs: list[int], profiles: int, workers: int, weight: float = MODEL_ANALYSIS_IN_PROFILES
) -> list[int]:
    """How many of ``profiles`` profile-only models each worker should take (largest share first, no
    zero shares) so that the workers end the model stage together: the pool hands the model runs
    (``model_runs``: their sizes in models, each costing ``weight`` profiles a model) out first, each to
    the first free worker, then the profile runs in this order. An even split left a new-model night's
    worker with the new model's run and half the profiles, its sibling idle for a third of the stage."""
    if profiles <= 0:
        return []
    loads = [0.0] * max(1, workers)
    for size in model_runs:
        loads[loads.index(min(loads))] += size * weight
    target = (sum(loads) + profiles) / len(loads)
    wants = sorted((max(0.0, target - load) for load in loads), reverse=True)
    shares = [int(profiles * want / sum(wants)) for want in wants]
    for i in range(profiles - sum(shares)):  # what rounding down left, to the largest shares first
        shares[i % len(shares)] += 1
    return [share for share in shares if share]


def selected(assets: tuple[str, ...] | None) -> str:
    """How a run's asset selection is named in the progress lines (nothing: every asset of its job)."""
    return f" [{', '.join(assets)}]" if assets else ""


def range_label(block: list, name: Callable) -> str:
    """How a run's partitions are named in the progress lines."""
    if len(block) == 1:
        return name(block[0])
    return f"{len(block)} partitions ({name(block[0])} .. {name(block[-1])})"


def pair_name(pair: tuple[str, str]) -> str:
    return printable(f"{from_partition_key(pair[0])} x {from_partition_key(pair[1])}")


def suite_name(key: str) -> str:
    return printable(f"suite {from_partition_key(key)}")


def model_name(key: str) -> str:
    return printable(f"model {from_partition_key(key)}")


#: How each per-suite or per-model job names its partitions in the progress lines.
NAMES_OF = {
    suite_job.name: suite_name,
    comparison_job.name: suite_name,
    model_job.name: model_name,
    model_profile_job.name: model_name,
}


class RunPlanner:
    """The runs of each stage, in ranges of at most ``partitions_per_run`` partitions adjacent in the
    instance's order of models (``model_order``) and suites (``suite_order``). With ``workers`` > 1 a
    stage is split so that each worker has a share to run."""

    def __init__(self, model_order: list[str], suite_order: list[str], partitions_per_run: int, workers: int):
        self.orders = {
            suite_job.name: suite_order,
            comparison_job.name: suite_order,
            model_job.name: model_order,
            model_profile_job.name: model_order,
        }
        self.model_order, self.suite_order = model_order, suite_order
        self.partitions_per_run, self.workers = partitions_per_run, workers

    def per_run(self, count: int) -> int:
        return max(1, min(self.partitions_per_run, -(-count // self.workers)))

    def keyed_runs(self, job_name: str, keys: list[str], per: int, assets: tuple[str, ...] | None = None) -> list[Run]:
        name = NAMES_OF[job_name]
        return [
            Run(job_name, block, range_label(block, name) + selected(assets), [name(k) for k in block], assets)
            for block in key_blocks(keys, self.orders[job_name], per)
        ]

    def pair_runs(self, pairs: list[tuple[str, str]], assets: tuple[str, ...] | None, per: int) -> list[Run]:
        """Runs over model x suite ``pairs`` (partition keys of each dimension)."""
        return [
            Run(
                ingest_and_fit_job.name,
                [str(MultiPartitionKey({"model": m, "suite": s})) for m, s in block],
                range_label(block, pair_name) + selected(assets),
                [pair_name(p) for p in block],
                assets,
            )
            for block in range_blocks(pairs, self.model_order, self.suite_order, per)
        ]

    def runs_of(self, job_name: str, keys: list[str], assets: tuple[str, ...] | None, per: int) -> list[Run]:
        """Runs of ``job_name`` covering partition ``keys`` in ranges of at most ``per`` partitions."""
        if job_name == ingest_and_fit_job.name:
            dimensions = [model_suite_partitions.get_partition_key_from_str(k).keys_by_dimension for k in keys]
            return self.pair_runs([(d["model"], d["suite"]) for d in dimensions], assets, per)
        return self.keyed_runs(job_name, keys, per, assets)

    def stages(
        self, scope: RunScope, changed: set, stale_pair_assets: dict, failed_validation: Callable[[str, str], list]
    ) -> list[list[Run]]:
        """The five stages' runs. A partition whose logs are unchanged reruns only its stale assets (edited
        GLM code refits the GLMs without reading and validating the logs again): one group of range runs
        per selection."""
        selections: dict[tuple[str, ...] | None, list[tuple[str, str]]] = {}
        for pair in scope.pairs:
            selection = partition_run_selection(
                pair in changed, stale_pair_assets.get(pair, set()), failed_validation(*pair)
            )
            key = None if selection is None else tuple(k.to_user_string() for k in selection)
            selections.setdefault(key, []).append((to_partition_key(pair[0]), to_partition_key(pair[1])))
        partition_runs = []
        for assets, keys in sorted(selections.items(), key=lambda item: item[0] or ()):
            partition_runs += self.pair_runs(keys, assets, self.per_run(len(scope.pairs)))
        suite_keys = [to_partition_key(s) for s in scope.suites]
        return [
            partition_runs,
            self.keyed_runs(suite_job.name, suite_keys, self.per_run(len(suite_keys))),
            self.keyed_runs(comparison_job.name, suite_keys, self.per_run(len(suite_keys))),
            self.model_stage(
                [to_partition_key(m) for m in scope.models], [to_partition_key(m) for m in scope.profile_only]
            ),
            [Run(lake_job.name, None, "lake-wide tables", [], None)],
        ]

    def model_stage(self, model_keys: list[str], profile_keys: list[str]) -> list[Run]:
        """The models' runs, then the profile-only ones, sized with several workers so that the workers end
        the stage together (:func:`profile_shares`)."""
        model_runs = self.keyed_runs(model_job.name, model_keys, self.per_run(len(model_keys)))
        if not (self.workers > 1 and model_runs and profile_keys):
            return model_runs + self.keyed_runs(model_profile_job.name, profile_keys, self.per_run(len(profile_keys)))
        ordered = [key for key in self.model_order if key in set(profile_keys)]
        shares = profile_shares([len(run.keys) for run in model_runs], len(ordered), self.workers)
        starts = [sum(shares[:i]) for i in range(len(shares))]
        # a share above the run size in equal runs (60 + 3 left a run's cost for 3 profiles), the largest first
        per = self.partitions_per_run
        profile_runs = sorted(
            (
                run
                for start, share in zip(starts, shares)
                for run in self.keyed_runs(
                    model_profile_job.name, ordered[start : start + share], -(-share // -(-share // per))
                )
            ),
            key=lambda run: -len(run.keys),
        )
        return model_runs + profile_runs

    def redo(self, run: Run, failing: tuple[str, ...] | None, succeeded_steps: tuple[str, ...]) -> tuple[list, list]:
        """The runs that redo a failed range run, for the steps that did not succeed (a step that did
        succeeded for every partition): (the partitions its failures are pinned to, one run each; the
        others in ranges again), or every partition one run each when the failures are not pinned to
        partitions (an error in a step's code, say)."""
        unfinished = tuple(a for a in (run.assets or JOB_STEPS[run.job]) if a not in succeeded_steps)
        if not unfinished or set(unfinished) == set(JOB_STEPS[run.job]):
            unfinished = run.assets

        def single(key: str, name: str) -> Run:
            return Run(run.job, [key], name + selected(unfinished), [name], unfinished)

        split = split_failed_range(run.keys, failing)
        if split is None:
            return [single(key, name) for key, name in zip(run.keys, run.names)], []
        named, rest = split
        return (
            [single(key, name) for key, name in zip(run.keys, run.names) if key in set(named)],
            self.runs_of(run.job, rest, unfinished, self.per_run(len(rest))) if rest else [],
        )


def with_data(stage: list[Run], suites_held: set[str], models_held: set[str]) -> tuple[list[Run], list[str]]:
    """``stage`` without the suites and models none of whose partitions has a sample table that passed
    validation (``suites_held``, ``models_held``: partition keys that have one, or outputs of an earlier
    night), and the names of those left out. Their steps would fail with 'no sample tables' beside the
    partition's own failure, which says what is wrong. One with outputs of an earlier night is run all the
    same: its step fails, so that those outputs (made from rows a rejected table has since superseded) are
    not shown as current."""
    held_by_job = {
        suite_job.name: suites_held,
        comparison_job.name: suites_held,
        model_job.name: models_held,
        model_profile_job.name: models_held,
    }
    kept, left_out = [], []
    for run in stage:
        held = held_by_job.get(run.job)
        if held is None or set(run.keys) <= held:
            kept.append(run)
            continue
        block = [(k, n) for k, n in zip(run.keys, run.names) if k in held]
        left_out += [n for k, n in zip(run.keys, run.names) if k not in held]
        if block:
            keys = [k for k, _ in block]
            kept.append(
                Run(
                    run.job,
                    keys,
                    range_label(keys, NAMES_OF[run.job]) + selected(run.assets),
                    [n for _, n in block],
                    run.assets,
                )
            )
    return kept, left_out
