"""The toggles: one declaration each, and everything else derives from it.

harness/config/run_config.py builds its frozen `Toggles` dataclass from TOGGLES (field, type, default,
docstring); the sweep takes each toggle's `on` value; the correctness gate its tolerance;
results/analysis/speedups.py and the portal their order and labels; a test checks that each toggle is read
only in its `owner` module. The declaration sits in results/ because it is the record's
vocabulary too, and results/ and portal/ may not import the harness.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Toggle:
    name: str
    default: bool | str
    """The 'off' value, also the value of a baseline run."""
    choices: tuple
    """Valid values; bool toggles take (False, True)."""
    on: bool | str
    """The value a sweep switches it on to (sweep files may override it with on_values)."""
    gate: tuple[float, float]
    """Correctness gate (harness/run/gate.py): relative loss tolerance at step 0, and its growth
    per step. Measured figures and their reasons are in harness/run/gate.py."""
    owner: str
    """The one module that reads it (path from the repository root)."""
    doc: str

    @property
    def type(self) -> str:
        """The annotation of its RunConfig field: 'bool' or 'str'."""
        return type(self.default).__name__

    def is_on(self, value: Any) -> bool:
        return value != self.default


TOGGLES: tuple[Toggle, ...] = (
    Toggle("dali", False, (False, True), True, (1e-6, 10.0), "harness/run/data.py",
           "Read batches through the workload's DALI pipeline (the same bytes: losses must agree)."),
    Toggle("channels_last", False, (False, True), True, (1e-4, 10.0), "harness/run/build.py",
           "Model and inputs in NHWC / NDHWC memory format (same math, reordered reductions)."),
    Toggle("cuda_graphs", False, (False, True), True, (1e-4, 10.0), "harness/run/build.py",
           "Capture the whole training step in one CUDA graph and replay it."),
    Toggle("compile", False, (False, True), True, (1e-4, 10.0), "harness/run/build.py",
           "torch.compile the model; mode from RunConfig.compile_mode."),
    Toggle("mpi_staging", False, (False, True), True, (1e-6, 10.0), "staging/__init__.py",
           "Stage the dataset to node-local storage with MPI before training (the same bytes)."),
    Toggle("amp", "off", ("off", "bf16", "fp16"), "bf16", (1e-2, 3.0), "harness/run/build.py",
           "Autocast precision: off, bf16 or fp16 (lower precision by design: a looser gate)."),
)
NAMES: tuple[str, ...] = tuple(t.name for t in TOGGLES)
BY_NAME: dict[str, Toggle] = {t.name: t for t in TOGGLES}
