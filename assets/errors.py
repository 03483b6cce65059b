"""Which failures are worth retrying."""

from collections.abc import Sequence
from contextlib import contextmanager

from dagster import Backoff, Failure, Jitter, MetadataValue, RetryPolicy

from assets.batch import FAILED_PARTITIONS
from assets.partitions import model_suite_key
from evalpipeline.steps.samples import NoDataError


#: Errors that the same input and code raise again on a retry (``ValueError`` covers Arrow's invalid data
#: and JSON decoding errors too).
DETERMINISTIC_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError)


@contextmanager
def permanent_errors(partitions: Sequence[str] = ()):
    """Bad or missing input fails the step at once with its message: retrying cannot help. So do
    errors that the same input and code raise every time (:data:`DETERMINISTIC_ERRORS`: a bug, or
    input no check foresaw), which a retry would only repeat after 20 s of backoff.

    The failure names the partitions it is about (a JSON list under ``FAILED_PARTITIONS``, as a
    range run's failed checks do): those a :class:`NoDataError` lists (``pairs``: model x suite
    partitions without data, which a backfill of every partition of a sparse grid asks for), else
    ``partitions``, the partition whose computation this is in a step's loop over the partitions of
    its range. The failure table then names them, and the rest of a failed range is rerun without
    them (``rerun_rest_of_failed_ranges``: assets/status.py; ``evalpipeline run`` does the same).

    Anything else (I/O errors, a crashed worker) propagates and is retried by the
    asset's RetryPolicy, with backoff.
    """
    try:
        yield
    except (NoDataError, *DETERMINISTIC_ERRORS) as exc:
        named = [str(model_suite_key(m, s)) for m, s in getattr(exc, "pairs", ())] or list(partitions)
        metadata = {FAILED_PARTITIONS: MetadataValue.json(named)} if named else None
        raise Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False, metadata=metadata) from exc


#: Every asset's step retry: a transient failure (a log still being copied, a busy network share, a
#: worker that died) gets two more tries, after 5 s then 15 s (Dagster's exponential backoff waits
#: (2**n - 1) x delay before retry n), each +/- up to 5 s of jitter so that parallel steps do not
#: retry in lockstep. Permanent errors (above) are not retried.
TRANSIENT_RETRY = RetryPolicy(max_retries=2, delay=5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
