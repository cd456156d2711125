"""Exceptions that end a run with a specific record status (see harness/runner.py)."""


class Unsupported(RuntimeError):
    """This configuration cannot run here (e.g. CUDA Graphs on a CPU machine). Status `unsupported`."""


class BadInput(RuntimeError):
    """The run was asked for something this setup can't give (e.g. ranks=4 under a 2-rank
    launch, an unwritable staging directory). Status `failed`; the CLI exits 2."""


class DataError(BadInput):
    """A missing, truncated or corrupt data file. The message names the file. Status `failed`."""


class Killed(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler. Status `killed`.

    A BaseException so that `except Exception` in user code cannot swallow it.
    """
