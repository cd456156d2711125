"""The names of configurations, defined once. config_label names a sweep cell (the sweep plans
with it, results/analysis/speedups.py names recorded runs with it, so a cell and its runs carry
one name). strategy_name names a parallel strategy: harness/config/parallel_config.py labels a config with
it, results/analysis/speedups.py labels recorded runs (whose parallel keys come back as strings) with it.
Pure, no pandas: the CLI imports it."""
from __future__ import annotations

from collections.abc import Sequence


def toggle_item(name: str, value) -> str:
    """One toggle that is on, as labels spell it: the name, or name=value when its value is not
    plain True (amp=bf16)."""
    return name if value is True or str(value) == "True" else f"{name}={value}"


def config_label(on: Sequence[str], widest: Sequence[str], strategy: str = "") -> str:
    """baseline, +x (add-one-in), all_on, all_on-x (leave-one-out), or the joined toggles; a
    parallel cell by its strategy and ranks (fsdp@2), with its toggles after a '+'. `on` and
    `widest` are toggle items (toggle_item); widest is the widest set of the group (its all_on)."""
    from results.record.toggles import NAMES
    order = {n: i for i, n in enumerate(NAMES)}
    on = sorted(on, key=lambda t: order.get(t.split("=")[0], len(order)))
    if strategy:
        return strategy + ("+" + "+".join(on) if on else "")
    if not on:
        return "baseline"
    if len(on) == 1:
        return f"+{on[0]}"
    if set(on) == set(widest):
        return "all_on"
    if len(on) == len(widest) - 1 and set(on) <= set(widest):
        return f"all_on-{(set(widest) - set(on)).pop().split('=')[0]}"
    return "+".join(on)


def strategy_name(data: str = "ddp", tp: int = 1, sp: bool = False, pp: int = 1, pp_virtual: int = 1,
                  pp_schedule: str = "1f1b", microbatches: int = 4, pp_split: str = "", ep: int = 1,
                  batch_split: str = "", cp: int = 1, recompute: str = "none", jobs: int = 1,
                  microbatch_split: str = "") -> str:
    """ddp, zero1, zero2, fsdp, tp2, tp2+sp, fsdp+tp2, pp2-1f1b-m4, fsdp+pp2v2-interleaved_1f1b-m8,
    pp2-gpipe-m4-split4.2, ep2, ddp-split3.1, cp2, fsdp+tp2+cp2, ddp+ac-full, jobs2xddp-split6.6.6.6,
    ddp-split17.7+pp2-1f1b-m17.7 (unequal pipeline replicas: each one's microbatches),
    ddp-split33.15-m3.2 (data parallel accumulating its gradients over each rank's microbatches) ..."""
    tp_part = f"tp{tp}{'+sp' if sp else ''}" if tp > 1 else ""
    pp_part = ""
    if pp > 1:
        v = f"v{pp_virtual}" if pp_virtual > 1 else ""
        m = microbatch_split.replace(",", ".") if microbatch_split else microbatches
        pp_part = f"pp{pp}{v}-{pp_schedule}-m{m}" + (f"-split{pp_split.replace(',', '.')}" if pp_split else "")
    ep_part = f"ep{ep}" if ep > 1 else ""
    cp_part = f"cp{cp}" if cp > 1 else ""
    ac_part = f"ac-{recompute}" if recompute != "none" else ""  # activation checkpointing, torchtitan's name
    data_part = data if (data != "ddp" or not (tp_part or pp_part or ep_part or cp_part or ac_part)) else ""
    if batch_split:  # (unequal pipeline replicas: "ddp-split17.7+pp2-...")
        data_part = (data_part or data) + f"-split{batch_split.replace(',', '.')}"
        if microbatch_split and pp == 1:
            data_part += f"-m{microbatch_split.replace(',', '.')}"
    name = "+".join(x for x in (data_part, tp_part, pp_part, ep_part, cp_part, ac_part) if x)
    return f"jobs{jobs}x{name or 'ddp'}" if jobs > 1 else name
