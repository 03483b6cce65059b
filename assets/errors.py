"""Which failures are worth retrying."""


from contextlib import contextmanager

from dagster import Failure

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
