"""Floor 4: one run, start to finish: the runner, the ordered builder (build.py), the loop,
data loaders, the correctness gate, graph capture, MLLOG and the run record. Imports floors 1-3."""
