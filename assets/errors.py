"""Which failures are worth retrying."""


from contextlib import contextmanager

from dagster import Backoff, Failure, Jitter, RetryPolicy

from evalpipeline.pipeline import NoDataError


@contextmanager
def permanent_errors():
    """Bad or missing input fails the step at once with its message: retrying cannot help.

    Anything else (I/O errors, a crashed worker) propagates and is retried by the
    asset's RetryPolicy, with backoff.
    """
    try:
        yield
    except (NoDataError, ValueError) as exc:
        raise Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc


#: Every asset's step retry: a transient failure (a log still being copied, a busy network share, a
#: worker that died) gets two more tries, 5 s then ~10 s later (jittered so that parallel steps do
#: not retry in lockstep). Permanent errors (above) are not retried.
TRANSIENT_RETRY = RetryPolicy(max_retries=2, delay=5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
