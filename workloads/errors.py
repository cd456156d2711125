"""Errors raised below the harness: by workload loaders and data writers, and by staging.

They live here, in the lowest package, so that workloads/ and staging/ raise them without
importing harness/ (the harness imports both; an edge back would be a cycle). harness.config.errors
re-exports them beside the harness's own run-ending exceptions.
"""


class BadInput(RuntimeError):
    """The run was asked for something this setup can't give (e.g. ranks=4 under a 2-rank
    launch, an unwritable staging directory). Status `failed`; the CLI exits 2."""


class DataError(BadInput):
    """A missing, truncated or corrupt data file. The message names the file. Status `failed`."""
