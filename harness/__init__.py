"""The benchmark harness: config, loop, timing, toggles, run records and sweeps.

Run `python -m harness --help`. The harness owns the training loop; workloads supply only
their specifics (see workloads/base.py).
"""
