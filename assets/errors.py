"""Which failures are worth retrying."""


from contextlib import contextmanager

from dagster import Backoff, Failure, Jitter, RetryPolicy

from evalpipeline.pipeline import NoDataError


#: Errors that the same input and code raise again on a retry (``ValueError`` covers Arrow's invalid data
#: and JSON decoding errors too).
DETERMINISTIC_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError)


@contextmanager
def permanent_errors():
    """Bad or missing input fails the step at once with its message: retrying cannot help. So do
    errors that the same input and code raise every time (:data:`DETERMINISTIC_ERRORS`: a bug, or
    input no check foresaw), which a retry would only repeat after 20 s of backoff.

    Anything else (I/O errors, a crashed worker) propagates and is retried by the
    asset's RetryPolicy, with backoff.
    """
    try:
        yield
    except (NoDataError, *DETERMINISTIC_ERRORS) as exc:
        raise Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc


#: Every asset's step retry: a transient failure (a log still being copied, a busy network share, a
#: worker that died) gets two more tries, after 5 s then 15 s (Dagster's exponential backoff waits
#: (2**n - 1) x delay before retry n), each +/- up to 5 s of jitter so that parallel steps do not
#: retry in lockstep. Permanent errors (above) are not retried.
TRANSIENT_RETRY = RetryPolicy(max_retries=2, delay=5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
