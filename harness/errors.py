"""Exceptions that end a run with a specific record status (see harness/runner.py).

BadInput and DataError are defined in workloads/errors.py (workloads and staging raise them
without importing the harness) and re-exported here."""

from workloads.errors import BadInput, DataError

__all__ = ["BadInput", "DataError", "Killed", "Unsupported", "UsageError"]


class UsageError(ValueError):
    """Bad user input (a flag, a config value, a sweep or site file). The CLI prints it as one
    line and exits with status 2."""


class Unsupported(RuntimeError):
    """This configuration cannot run here (e.g. CUDA Graphs on a CPU machine). Status `unsupported`."""


class Killed(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler. Status `killed`.

    A BaseException so that `except Exception` in user code cannot swallow it.
    """
