"""Workload registry. Importing a workload package must not import torch (its model and data
code is imported lazily), so `harness list` and config validation stay fast."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from workloads.base import Workload

# name -> package exposing WORKLOAD
_MODULES = {
    "lm": "workloads.lm",
    "cosmoflow": "workloads.cosmoflow",
    "deepcam": "workloads.deepcam",
}


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> "Workload":
    if name not in _MODULES:
        raise UsageError(f"unknown workload {name!r}; valid workloads: {', '.join(names())}")
    return importlib.import_module(_MODULES[name]).WORKLOAD
