"""What one run measured, in the words `harness run` prints: median step with its interval,
throughput, MFU, the stability verdict with its cause, and the warning a sweep would print.
Pure (pandas, numpy): the CLI calls it with the record it just wrote."""
from __future__ import annotations

import numpy as np
import pandas as pd

from results.stats import estimators as stats
from results.stats import stability


def steady_steps(rec: dict) -> list[float]:
    return [m["step_s"] for m in rec.get("metrics", []) if m.get("kind") == "step" and m.get("phase") == "steady"]


def median_with_interval(samples: list[float]) -> tuple[float, float, float]:
    """The median step and its distribution-free 95% interval from order statistics (NaN bounds
    with fewer than 6 steps). Steps of one run are not independent draws (the machine drifts), so
    this is the interval of this run's median, not of the configuration's: repeats say that."""
    med = float(np.median(np.asarray(samples, dtype=float)))
    return (med, *(stats.median_interval(list(samples)) or (float("nan"), float("nan"))))


def describe(rec: dict) -> list[str]:
    """Lines for a finished run: what it measured, and a warning when the machine was not quiet."""
    s, cfg = rec["summary"], rec["config"]
    steps = steady_steps(rec)
    if not steps:
        return []
    med, lo, hi = median_with_interval(steps)
    ci = f"[{1e3 * lo:.1f}, {1e3 * hi:.1f}] 95%" if lo == lo else "(no interval: < 6 steps)"
    parts = [f"{cfg.get('workload')}/{cfg.get('size')} on {cfg.get('device')}: median step {1e3 * med:.1f} ms {ci}, "
             f"{len(steps)} steps"]
    if isinstance(s.get("samples_per_s"), (int, float)):
        parts.append(f"{s['samples_per_s']:.1f} samples/s")
    mfu = s.get("mfu_measured_pct")
    if isinstance(mfu, (int, float)):
        src = s.get("peak_source", "")
        n = s.get("peak_devices", 1)
        t = s.get("torch_threads")
        # a CPU rank's peak was measured at its own threads; a GPU's is the GPU's
        each = f" ({t} thread{'' if t == 1 else 's'} each)" if cfg.get("device") == "cpu" else ""
        whose = "this device's measured peak" if n == 1 else f"{n} ranks' measured peaks{each}"
        parts.append(f"MFU {mfu:.1f}% of {whose}"
                     + (f" ({src})" if src.startswith("fp32") and s.get("peak_dtype") != "fp32" else ""))
    verdict = stability.verdict(pd.DataFrame([s]), [steps])
    lines = [", ".join(parts) + f"; {verdict}"]
    if isinstance(s.get("ab_ratio"), (int, float)):
        lines.append(interleaved_line(s))
    elif s.get("ab_unavailable"):
        lines.append(f"not interleaved: {s['ab_unavailable']}")
    if stability.kind(verdict) == stability.DISTURBED:
        cause = verdict.removeprefix(f"{stability.DISTURBED}: ").split("; ")[0]
        lines.append(f"warning: this run was measured on a disturbed machine ({cause}): its numbers can't be "
                     "trusted; `python -m harness doctor` says what is loading the machine")
    return lines


def interleaved_line(s: dict) -> str:
    """The in-process A/B figure of an interleaved run: speedup over the other side (named)
    [95% CI], block pairs, and what ended the sampling."""
    ab = s.get("ab", {}) if isinstance(s.get("ab"), dict) else {}
    aa = bool(ab.get("aa"))
    against = "itself (A/A)" if aa else f"its other side ({ab.get('against', 'every toggle off')})"
    lo, hi = s.get("ab_lo"), s.get("ab_hi")
    ci = f"[{lo:.3f}, {hi:.3f}]" if isinstance(lo, float) and lo == lo else "[no interval]"
    hw = s.get("ab_half_width")
    target = ab.get("precision_target")
    ended = ("precision target reached" if s.get("ab_precision_reached") else
             f"{ab.get('ended_by', '?')} ended it" + (f" (target +-{target:.0%})" if isinstance(target, float) else ""))
    return (f"interleaved in this process with {against}: speedup {s['ab_ratio']:.3f}x {ci} 95% over "
            f"{s.get('ab_pairs')} block pairs" + (f", +-{hw:.1%}" if isinstance(hw, float) else "") +
            f"; {ended} after {s.get('ab_seconds', 0):.0f} s of sampled steps")
