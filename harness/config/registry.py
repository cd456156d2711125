"""Workload registry. Importing a workload package must not import torch (its model and data
code is imported lazily), so `harness list` and config validation stay fast.

A fourth workload touches only its own package and this registry: add it to _MODULES, or, for
one that lives outside this repository, name it in HARNESS_WORKLOADS="name=package[,...]"
(the package must be importable and expose WORKLOAD); `register` does the same in-process.
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from harness.config.errors import UsageError

if TYPE_CHECKING:
    from workloads.base import Workload

# name -> package exposing WORKLOAD
_MODULES = {
    "lm": "workloads.lm",
    "cosmoflow": "workloads.cosmoflow",
    "deepcam": "workloads.deepcam",
}
ENV = "HARNESS_WORKLOADS"


def register(name: str, module: str) -> None:
    _MODULES[name] = module


def _from_env() -> None:
    for item in filter(None, (s.strip() for s in os.environ.get(ENV, "").split(","))):
        name, sep, module = item.partition("=")
        if not sep or not name.strip() or not module.strip():
            raise UsageError(f"{ENV}: expected name=package entries separated by commas; got {item!r}")
        register(name.strip(), module.strip())


def names() -> list[str]:
    _from_env()
    return sorted(_MODULES)


def get(name: str) -> "Workload":
    _from_env()
    if name not in _MODULES:
        raise UsageError(f"unknown workload {name!r}; valid workloads: {', '.join(names())}")
    try:
        return importlib.import_module(_MODULES[name]).WORKLOAD
    except (ImportError, AttributeError) as e:
        raise UsageError(f"workload {name!r}: cannot load {_MODULES[name]}.WORKLOAD ({e})") from None


def capability(wl: "Workload", name: str):
    """The workload's optional capability `name` (workloads/base.py CAPABILITIES): its method, or
    None where the workload has none. The one place that looks a hook up by name."""
    from workloads.base import CAPABILITIES
    if name not in CAPABILITIES:
        raise KeyError(f"{name!r} is not a workload capability; known: {', '.join(CAPABILITIES)}")
    return getattr(wl, name, None)


def supporting(name: str) -> list[str]:
    """The registered workloads that have capability `name`."""
    return [n for n in names() if capability(get(n), name) is not None]
