"""Exceptions that end a run with a specific record status (see harness/runner.py)."""


class Unsupported(RuntimeError):
    """This configuration cannot run here (e.g. CUDA Graphs on a CPU machine). Status `unsupported`."""


class DataError(RuntimeError):
    """A missing, truncated or corrupt data file. The message names the file. Status `failed`."""


class Killed(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler. Status `killed`.

    A BaseException so that `except Exception` in user code cannot swallow it.
    """
