"""Floor 1: what a run is. RunConfig and its toggles (run_config.py), the parallel section
(parallel_config.py), the workload registry and the exceptions that end a run. Torch-free, so the
CLI validates before paying for torch. Imports nothing else of the harness."""
