"""Exceptions that end a run with a specific record status (see harness/run/runner.py).

BadInput and DataError are defined in workloads/errors.py (workloads and staging raise them
without importing the harness) and re-exported here."""

from workloads.errors import BadInput, DataError

__all__ = ["BadInput", "DataError", "Killed", "Unsupported", "UsageError"]


class UsageError(ValueError):
    """Bad user input (a flag, a config value, a sweep or site file). The CLI prints it as one
    line and exits with status 2."""


LINE_MAX = 500  # characters of an error line; the rest is cut, its length said


def one_line(e: BaseException) -> str:
    """An error as one line of bounded length, however large the value it quotes."""
    text = " ".join(str(e).split("\n")) or type(e).__name__
    return text if len(text) <= LINE_MAX else f"{text[:LINE_MAX]}... ({len(text)} characters in all)"


class Unsupported(RuntimeError):
    """This configuration cannot run here (e.g. CUDA Graphs on a CPU machine). Status `unsupported`."""


class Killed(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler. Status `killed`.

    A BaseException so that `except Exception` in user code cannot swallow it.
    """
