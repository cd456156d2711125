"""The planner's two utilizations (definitions in results/planner/search.py's docstring): per device
(the mixed job against each device training alone) and as the seed counts it (against each
kind's own best homogeneous job)."""
from __future__ import annotations

from results.planner.layer_costs import Costs


def _alone_rate(c: Costs, batch: int) -> float:
    """Samples/s one device of this kind reaches training alone on `batch` samples per step."""
    return batch / (c.sample_s(batch) * batch + c.optimizer_s_per_param * c.total_params)


def utilization(samples_per_s: float, devices: list[str], costs: dict[str, Costs], batch: int) -> float:
    from collections import Counter  # each kind's rate once, times its devices (10,000 devices, 3 kinds)
    return samples_per_s / sum(n * _alone_rate(costs[k], batch) for k, n in Counter(devices).items())


def utilization_seed(samples_per_s: float, rates: dict[str, dict]) -> float | None:
    """Throughput of the mixed job / the sum of the homogeneous jobs' (homogeneous_rates); None
    when a kind cannot train alone (the bound is then not defined)."""
    if any(r["samples_per_s"] is None for r in rates.values()):
        return None
    return samples_per_s / sum(r["samples_per_s"] for r in rates.values())
