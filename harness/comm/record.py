"""The record of one collectives benchmark (collective, backend, ranks, dtype), written by rank 0.

Same files and statuses as a training run's record (results/record/schema.py), under
results/comm/<run_id>/: config.json (kind "comm" and the benchmark's settings), env.json,
metrics.jsonl (one line per size, kind "size": nccl-tests' columns for each mode), summary.json
(the largest size's bandwidths, the smallest size's latency, the memory-copy ceiling) and
status.json, written last. No mlperf.log: this is not an MLPerf benchmark.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.run.record import unique_stamp
from results.record import comm as comm_record
from results.record import schema


class CommRecord:
    def __init__(self, root: Path, config: dict[str, Any], env: dict[str, Any], info: dict[str, Any]):
        via = "-via-host" if config.get("via") == "host" else ""
        self.run_id = (f"comm-{config['collective']}-{config['backend']}{via}-{config['dtype']}-n{config['ranks']}-"
                       f"{unique_stamp()}")
        self.dir = Path(root) / comm_record.SUBDIR / self.run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self.started = time.time()
        self.config = {**config, "kind": comm_record.KIND, "run_id": self.run_id, "record_version": schema.RECORD_VERSION}
        schema.write_json(self.dir / schema.CONFIG, self.config)
        schema.write_json(self.dir / schema.ENV, env)
        schema.open_record(self.dir, self.started)
        self._metrics = open(self.dir / schema.METRICS, "a", buffering=1)  # a kill loses one line at most
        self.rows: list[dict] = []
        self.info: dict[str, Any] = dict(info)  # facts of the machine for the summary (ceilings, cores, load)
        self.finished = False
        self.status = schema.RUNNING
        self.final: dict[str, Any] = {}  # the summary as written at finish

    def log_size(self, row: dict[str, Any]) -> None:
        row = {"kind": "size", "t": time.time() - self.started, **row}
        self.rows.append(row)
        self._metrics.write(json.dumps(row) + "\n")

    def summary(self) -> dict[str, Any]:
        """The largest measured size's figures (in-place where measured, as training uses them)
        and the smallest size's time: bandwidth and latency in two numbers."""
        out: dict[str, Any] = {**self.info, "sizes_done": len(self.rows)}
        done = [r for r in self.rows if comm_record.best_mode(r)]
        if done:
            big, small = done[-1], done[0]
            mode = comm_record.best_mode(big)
            out.update(bytes_max=big["bytes"], mode=mode, busbw_gb_per_s=big[f"busbw_gb_per_s_{mode}"],
                       algbw_gb_per_s=big[f"algbw_gb_per_s_{mode}"], time_us_max_size=big[f"time_us_{mode}"],
                       bytes_min=small["bytes"], latency_us=small[f"time_us_{comm_record.best_mode(small)}"],
                       wrong_elements=sum(r.get("wrong", 0) for r in self.rows))
            ceiling = self.info.get("copy_gb_per_s_rank")
            if ceiling:
                out["busbw_frac_of_copy"] = out["busbw_gb_per_s"] / ceiling
        return out

    def finish(self, status: str, reason: str = "") -> None:
        if self.finished:
            return
        self.finished = True
        self._metrics.close()
        self.final = self.summary()
        self.status = status
        schema.close_record(self.dir, self.final, status, reason, self.started)
