"""The run record: an immutable folder per run, written by rank 0 only.

results/runs/<run_id>/ holds config.json, env.json, metrics.jsonl (raw per-step samples,
line-buffered so a kill loses at most the step in flight), mlperf.log, summary.json and
status.json (written last, atomically). See results/record/schema.py for the names.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from harness.config.run_config import RunConfig
from harness.run.mlperf_log import MLLog, NullMLLog
from results.record import schema
from results.stats import scoring
from results.stats import estimators as stats


def unique_stamp() -> str:
    """UTC time + pid + random suffix: unique across processes and across runs in one process
    and second (the tail of every record's id)."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}{secrets.token_hex(2)}"


def make_run_id(cfg: RunConfig) -> str:
    return f"{cfg.workload}-{cfg.size}-{cfg.variant_hash()}-{unique_stamp()}"


class RunRecord:
    def __init__(self, runs_root: Path, cfg: RunConfig, env: dict, run_id: str | None = None):
        self.run_id = run_id or make_run_id(cfg)
        self.dir = Path(runs_root) / self.run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self.started = time.time()
        schema.write_json(self.dir / schema.CONFIG, {**cfg.to_dict(), "run_id": self.run_id,
                                               "variant": cfg.variant_hash(),
                                               "record_version": schema.RECORD_VERSION})
        schema.write_json(self.dir / schema.ENV, env)
        schema.open_record(self.dir, self.started)
        self._metrics = open(self.dir / schema.METRICS, "a", buffering=1)
        self.mllog = MLLog(self.dir / schema.MLPERF_LOG)
        self.steps: list[dict] = []
        self.evals: list[dict] = []
        self.info: dict[str, Any] = {}   # run facts the loop learns (batch, flops, times ...)
        self.finished = False

    def attach(self, src: Path, name: str) -> None:
        """Copy a file that belongs with the run (e.g. its Slurm script) into the folder."""
        if src.is_file():
            (self.dir / name).write_bytes(src.read_bytes())

    def log_step(self, **row: Any) -> None:
        row["kind"] = "step"
        self.steps.append(row)
        self._metrics.write(json.dumps(row) + "\n")

    def log_eval(self, **row: Any) -> None:
        row["kind"] = "eval"
        self.evals.append(row)
        self._metrics.write(json.dumps(row) + "\n")

    def summary(self) -> dict[str, Any]:
        """Figures derived from the samples so far (also for killed and failed runs)."""
        steady = [s for s in self.steps if s["phase"] == "steady"]
        warm = [s for s in self.steps if s["phase"] == "warmup"]
        out: dict[str, Any] = {**self.info, "steps_done": len(self.steps), "steady_steps": len(steady)}
        if warm:
            out["first_step_s"] = warm[0]["step_s"]
            out["warmup_s"] = sum(s["step_s"] for s in warm)
        if steady:
            out.update(stats.step_summary([s["step_s"] for s in steady]))
            busy = sum(s["step_s"] for s in steady)
            out["data_wait_frac"] = sum(s["data_s"] for s in steady) / busy if busy else 0.0
            batch = self.info.get("global_batch")
            if batch:
                out["samples_per_s"] = batch / out["median_step_s"]
                if self.info.get("flops_per_sample"):
                    out["achieved_tflops"] = out["samples_per_s"] * self.info["flops_per_sample"] / 1e12
                    out.update(self._mfu(out["samples_per_s"]))
        m = self.info.get("machine", {})
        for key in ("others_cpu_frac", "steal_frac", "cpu_per_wall", "cpus"):
            if m.get(key) is not None:
                out[key] = m[key]
        for when in ("start", "end"):
            if m.get(when, {}).get("loadavg_1m") is not None:
                out[f"load_1m_{when}"] = m[when]["loadavg_1m"]
        if self.steps:
            out["final_loss"] = self.steps[-1]["loss"]
        if self.evals:
            out["quality"] = self.evals[-1]["quality"]
        for cls, share in self.info.get("breakdown", {}).get("shares", {}).items():
            out[f"time_frac_{cls}"] = share  # fraction of the profiled step time
        bd = self.info.get("breakdown", {})
        if "ops_per_step" in bd:  # what fusion changes: ops dispatched and profiled time per step
            out.update(ops_per_step=bd["ops_per_step"], fused_kernels_per_step=bd["fused_kernels_per_step"],
                       profiled_step_s=bd["profiled_s"] / bd["steps"])
        if "ridge_flop_per_byte" in self.info.get("roofline", {}):
            from harness.measure.op_roofline import summary_figures
            # each rank's achieved FLOP/s against its own roofs (measured at the rank's threads)
            per_rank = out["achieved_tflops"] * 1e12 / self.info.get("world", 1) if "achieved_tflops" in out else None
            out.update(summary_figures(self.info["roofline"], per_rank))
        return out

    def _peak_devices(self) -> int:
        """How many measured peaks the run's FLOP/s is over. GPUs: one per rank. CPUs: the peak
        was measured at the rank's own thread count (peak.device_name), so a node's ranks add
        their peaks up to what its cores hold: min(ranks on the node, cores // threads) per node.
        (2 ranks x 1 thread on 2 cores: 2 one-thread peaks; counting the node's once made a
        DDP run of LM small print "MFU 144%".)"""
        world = self.info.get("world", 1)
        if self.info.get("device") == "cuda":
            return world
        nodes = max(1, self.info.get("nodes", 1))
        threads = max(1, self.info.get("torch_threads") or 1)
        cpus = self.info.get("machine", {}).get("cpus") or threads  # the cores this process may run on
        return nodes * min(-(-world // nodes), max(1, cpus // threads))

    def _mfu(self, samples_per_s: float) -> dict[str, float]:
        """MFU against the measured and the vendor peak, over all devices of the run (_peak_devices)."""
        devices = self._peak_devices()
        out: dict[str, float] = {"peak_devices": devices}
        for kind in ("measured", "vendor"):
            peak = self.info.get(f"peak_flop_per_s_{kind}")
            if peak:
                out[f"mfu_{kind}_pct"] = scoring.mfu_pct(self.info["flops_per_sample"], samples_per_s, peak * devices)
        return out

    def finish(self, status: str, reason: str = "") -> None:
        if self.finished:
            return
        self.finished = True
        problem = None
        for close in (self._metrics.close, self.mllog.close):  # buffered lines are written here
            try:
                close()
            except OSError as e:  # a full disk: the record still gets its final status if it can
                problem = problem or e
        if problem:
            status, reason = schema.FAILED, f"could not write the record: {problem.strerror or problem}"
        schema.close_record(self.dir, self.summary(), status, reason, self.started)
        if problem:
            raise problem


class NullRecord:
    """What ranks other than 0 get: same interface, writes nothing."""

    def __init__(self) -> None:
        self.mllog = NullMLLog()
        self.info: dict[str, Any] = {}
        self.steps: list[dict] = []
        self.evals: list[dict] = []
        self.dir = None
        self.run_id = ""

    def attach(self, src: Path, name: str) -> None: ...
    def log_step(self, **row: Any) -> None: ...
    def log_eval(self, **row: Any) -> None: ...
    def finish(self, status: str, reason: str = "") -> None: ...
