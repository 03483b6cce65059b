"""The worker processes of ``evalpipeline run``: a stage's runs executed side by side, one run a worker.

Workers fork from a forkserver that imported the code location once (:func:`_worker_context`); a worker
that dies breaks a ``ProcessPoolExecutor`` for good, so :class:`WorkerPool` starts fresh ones and
:func:`run_steps` reruns what the break ended. Nothing here knows what a run does: the caller passes
the function that executes one (``block``).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, NamedTuple

from evalpipeline.lake import process_alive
from resources.executors import STEP_PRELOAD_MODULES


class StepOutcome(NamedTuple):
    """What one run of a stage did. ``failing_partitions``: for a failed range run whose every failed
    step names its partitions (a blocking check, an error in one partition's computation), those
    partitions (assets.status.failing_partitions); else None. ``succeeded_steps``:
    the steps (asset keys) of a failed run that succeeded, for every partition of its range."""

    ok: bool
    seconds: float
    lines: list[str]
    failing_partitions: tuple[str, ...] | None = None
    succeeded_steps: tuple[str, ...] = ()


def run_steps(
    steps: list,
    count: int,
    echo: Callable[[str], None],
    *,
    pool: WorkerPool | None,
    instance,
    on_lost_workers: Callable[[], None],
    block: Callable[..., tuple],
) -> list[StepOutcome]:
    """Run ``steps`` ((number, job, keys, label, assets)) and return each one's :class:`StepOutcome`, in
    order: side by side in ``pool`` when there is one and more than one step, else one after another here.

    A worker that dies (killed, out of memory) breaks the pool, and the pool ends the runs of its
    healthy siblings with it. Those runs would stay STARTED in Dagster: ``on_lost_workers`` marks
    them failed (and records them) once the broken pool's processes are gone. A step the break
    failed whose worker had finished it all the same (its result not collected yet: the outcome each
    worker also keeps on disk, :func:`_keep_outcome`) is reported as it ended; every other step the
    break ended is run once more, one at a time in fresh workers, so a sibling's run does not fail
    for another's death. A step whose worker dies again is reported failed."""
    import tempfile

    if pool is None or len(steps) < 2:
        in_order = []
        for number, job_name, keys, label, assets in steps:
            echo(f"[{number}/{count}] {job_name} {label} ...")
            outcome = StepOutcome(*block(job_name, keys, assets=assets, instance=instance))
            echo_outcome(echo, count, number, job_name, label, outcome)
            in_order.append(outcome)
        return in_order
    outcomes: dict[int, StepOutcome] = {}
    with tempfile.TemporaryDirectory(prefix="evalpipeline-outcomes-") as kept:
        lost = _submit_and_collect(pool, steps, count, echo, instance, block, outcomes, kept)
        if lost:
            pool.reset()  # joins the broken pool's processes: their runs are now orphans
            on_lost_workers()
            lost = _finished_anyway(lost, count, echo, outcomes, kept)
        if lost:
            echo(
                f"a worker process died: running the {len(lost)} run(s) the break ended once more, one at a "
                "time in fresh workers (a run that kills its worker again then ends no other)"
            )
            for step in lost:
                if _submit_and_collect(pool, [step], count, echo, instance, block, outcomes, kept):
                    pool.reset()
                    on_lost_workers()
                    if not _finished_anyway([step], count, echo, outcomes, kept):
                        continue
                    number, job_name, _keys, label, _assets = step
                    outcomes[number] = StepOutcome(False, 0.0, ["    worker process lost twice: not run again"])
                    echo_outcome(echo, count, number, job_name, label, outcomes[number])
    return [outcomes[number] for number, *_rest in steps]  # in the order of ``steps``


def _keep_outcome(path: str, block: Callable[..., tuple], *args) -> tuple:
    """Run ``block(*args)`` in a worker and also keep its outcome at ``path`` (JSON, written atomically).
    A pool that breaks fails the futures of every step whose result it had not collected, including
    steps whose worker went on to finish them; what is kept here tells those from the lost ones."""
    import json

    from evalpipeline.lake import write_bytes_atomic

    outcome = tuple(block(*args))
    write_bytes_atomic(json.dumps(list(outcome)).encode(), Path(path))
    return outcome


def _finished_anyway(
    lost: list, count: int, echo: Callable[[str], None], outcomes: dict[int, StepOutcome], kept: str
) -> list:
    """Of the steps a broken pool ended (once its processes are gone), report those whose worker kept
    an outcome (:func:`_keep_outcome`) as they ended, into ``outcomes``; return the others."""
    import json

    still_lost = []
    for step in lost:
        number, job_name, _keys, label, _assets = step
        path = Path(kept) / f"{number}.json"
        if not path.exists():
            still_lost.append(step)
            continue
        ok, seconds, lines, *rest = json.loads(path.read_text())
        failing = tuple(rest[0]) if rest and rest[0] is not None else None
        outcome = StepOutcome(
            ok,
            seconds,
            [*lines, "    (finished before a sibling worker's death broke the pool)"],
            failing,
            tuple(rest[1]) if len(rest) > 1 else (),
        )
        echo_outcome(echo, count, number, job_name, label, outcome)
        outcomes[number] = outcome
    return still_lost


def _submit_and_collect(
    pool: WorkerPool,
    steps: list,
    count: int,
    echo: Callable[[str], None],
    instance,
    block,
    outcomes: dict[int, StepOutcome],
    kept: str,
) -> list:
    """Submit ``steps`` to ``pool``, print each outcome as it arrives into ``outcomes`` (by step
    number), and return the steps a broken pool ended (in step order), neither printed nor in
    ``outcomes``: whether each finished is known only once the pool's processes are gone."""
    futures = {}
    for step in steps:
        number, job_name, keys, label, assets = step
        echo(f"[{number}/{count}] {job_name} {label} ... (worker process)")
        futures[
            pool.submit(
                _keep_outcome,
                str(Path(kept) / f"{number}.json"),
                block,
                job_name,
                keys,
                instance.root_directory,
                assets,
            )
        ] = step
    lost = []
    for future in as_completed(futures):
        number, job_name, _keys, label, _assets = futures[future]
        try:
            outcome = StepOutcome(*future.result())
        except BrokenProcessPool:
            lost.append(futures[future])
            continue
        except Exception as error:  # the step's function itself failed outside Dagster
            outcome = StepOutcome(False, 0.0, [f"    worker process failed: {error!r}"])
        echo_outcome(echo, count, number, job_name, label, outcome)
        outcomes[number] = outcome
    return sorted(lost)


def _start_every_worker(pool: ProcessPoolExecutor, workers: int) -> None:
    """Start all ``workers`` of ``pool`` now, and have its manager thread watch every one.

    The pool starts a worker in ``submit`` only when none is idle, and after waking its manager thread,
    which then waits on the workers that exist: it only notices the death of those (CPython 3.11's
    ``submit``), so a worker started by a later submit could die unnoticed until another run ended (a
    sibling's run then finished and was reported as finished, instead of being ended by the death and
    run again). One task per worker that holds its worker until every worker has checked in
    (:func:`_check_in`) makes each submit start a worker, however late the previous one is scheduled;
    a submit after the last start wakes the manager thread again, so its next wait includes every worker."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="evalpipeline-workers-") as folder:
        for started in [pool.submit(_check_in, folder, workers) for _ in range(workers)]:
            started.result()
    pool.submit(os.getpid).result()


def _check_in(folder: str, workers: int, timeout: float = 60.0) -> int:
    """A worker's first task (:func:`_start_every_worker`): leave its pid in ``folder`` and wait until
    ``workers`` workers have (at most ``timeout`` seconds)."""
    (Path(folder) / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while len(os.listdir(folder)) < workers and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def _exit_with_parent(parent: int, interval: float = 0.5) -> None:
    """Worker initialiser: end this worker when the process that started it is gone (killed, say).
    Otherwise an orphaned worker finishes its run (minutes of a range) while the rerun that follows
    the kill fits the same partitions; what it had not written atomically yet is simply not written.
    A worker forked by the forkserver (:func:`_worker_context`) is the server's child, and the server
    ends with ``parent``: then this worker's parent process changes, which ends it too."""
    forked_by = os.getppid()

    def watch() -> None:
        while os.getppid() == forked_by and process_alive(parent):
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


#: The environment this process's forkserver was started with (None: not started yet).
_server_environment: dict[str, str] | None = None


def _worker_context():
    """Where :class:`WorkerPool` starts its workers: forked from a forkserver that has imported the code
    location and Great Expectations (:data:`resources.executors.STEP_PRELOAD_MODULES`, as the local
    executor's steps are), started here on first use without waiting for it; else spawned.

    Importing nothing that starts a thread or an XLA backend, the server is safe to fork. A forked
    worker has the server's environment, not the caller's (``os.environ`` is where the lake, the
    landing folder and the configuration file are named): when this process's environment is no
    longer the one the server started with (a second job here for another lake, say), the workers
    are spawned, as they are on a platform without forkserver."""
    global _server_environment
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    environment = dict(os.environ)
    if _server_environment is None:
        from multiprocessing import forkserver

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([*STEP_PRELOAD_MODULES, "resources.run.loop"])  # the code location, the run loop
        forkserver.ensure_running()
        _server_environment = environment
    elif environment != _server_environment:
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("forkserver")


class WorkerPool:
    """Worker processes, started on first use and forked from a forkserver that imported the code
    location once (:func:`_worker_context`). A worker that dies (killed, out of memory) breaks a
    ``ProcessPoolExecutor`` for good, ending the work of the other workers too; here the next
    ``submit`` (or :meth:`reset`) starts fresh workers instead, so the job goes on (:func:`run_steps`
    reruns what the break ended). Workers end when the process that started them does
    (:func:`_exit_with_parent`)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, fn: Callable, *args):
        if self._pool is not None:
            try:
                return self._pool.submit(fn, *args)
            except BrokenProcessPool:
                self._pool.shutdown(cancel_futures=True)
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=_worker_context(),
            initializer=_exit_with_parent,
            initargs=(os.getpid(),),
        )
        _start_every_worker(self._pool, self.workers)
        return self._pool.submit(fn, *args)

    def prepare(self) -> None:
        """Start the forkserver now (:func:`_worker_context`): it imports the code location (~3 s of one
        core) while the job discovers its logs and judges staleness on the other, so the first ``submit``
        forks ready workers. Nothing to do with one worker (no pool)."""
        if self.workers > 1:
            _worker_context()

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def reset(self) -> None:
        """Shut the current workers down and wait for them to exit; the next ``submit`` starts new ones."""
        self.shutdown()


def echo_outcome(
    echo: Callable[[str], None], total: int, number: int, job_name: str, label: str, outcome: StepOutcome
) -> None:
    echo(f"[{number}/{total}] {job_name} {label}: {'ok' if outcome.ok else 'FAILED'} ({outcome.seconds:.1f}s)")
    for line in outcome.lines:
        echo(line)
