"""Floor 7: `make perf` (benchmarks, not tests): driver.py runs them all, one module per
benchmark. `python -m harness.bench`."""
