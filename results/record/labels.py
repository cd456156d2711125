"""The name of a parallel strategy, defined once: harness/config/parallel_config.py labels a config with
it, results/analysis/speedups.py labels recorded runs (whose parallel keys come back as strings) with it.
Pure, no pandas: the CLI imports it."""
from __future__ import annotations


def strategy_name(data: str = "ddp", tp: int = 1, sp: bool = False, pp: int = 1, pp_virtual: int = 1,
                  pp_schedule: str = "1f1b", microbatches: int = 4, pp_split: str = "", ep: int = 1,
                  batch_split: str = "") -> str:
    """ddp, zero1, fsdp, tp2, tp2+sp, fsdp+tp2, pp2-1f1b-m4, fsdp+pp2v2-interleaved_1f1b-m8,
    pp2-gpipe-m4-split4.2, ep2, ddp-split3.1 ..."""
    tp_part = f"tp{tp}{'+sp' if sp else ''}" if tp > 1 else ""
    pp_part = ""
    if pp > 1:
        v = f"v{pp_virtual}" if pp_virtual > 1 else ""
        pp_part = f"pp{pp}{v}-{pp_schedule}-m{microbatches}" + (f"-split{pp_split.replace(',', '.')}" if pp_split else "")
    ep_part = f"ep{ep}" if ep > 1 else ""
    data_part = data if (data != "ddp" or not (tp_part or pp_part or ep_part)) else ""
    if batch_split:
        data_part += f"-split{batch_split.replace(',', '.')}"
    return "+".join(x for x in (data_part, tp_part, pp_part, ep_part) if x)
