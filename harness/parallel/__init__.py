"""Floor 3: how training spreads over ranks: process groups (dist.py), the data/tensor/
sequence strategies (strategies.py), pipeline and expert parallel, the bytes each costs
(accounting.py) and CPU quotas that make ranks unequal (cpu_quota.py). Imports harness.config and
harness.measure below it."""
