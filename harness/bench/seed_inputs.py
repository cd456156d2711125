"""What harness/bench/planner_seed.py's check is made from and keeps: each round's profiles in
brief, the inputs copied out beside the figures, and each kind's calibration from an interleaved
check written into copies of the inventories."""
from __future__ import annotations

import json
from pathlib import Path


def keep_inputs(tmp: Path, dest: Path) -> Path:
    """What the check's plans were made from, kept beside its figures: links (`harness comm`
    records, the four ranks' and each pair's), each round's profiles, the inventories and the
    plans. Why: a model changed later can price the same plans on the same profiles again
    (HARNESS_RESULTS=dest harness plan --devices dest/inv-pp-r0.yaml ...); the bench's temporary
    folder is gone when it returns. The inventories name their profiles by path: rewritten to dest."""
    import shutil
    dest.mkdir(parents=True, exist_ok=True)
    for src in [tmp / "comm", tmp / "plans", *tmp.glob("comm-*"), *tmp.glob("round*")]:
        if src.is_dir():
            shutil.copytree(src, dest / src.name, dirs_exist_ok=True)
    for inv in tmp.glob("inv-*.yaml"):
        (dest / inv.name).write_text(inv.read_text().replace(str(tmp), str(dest)))
    return dest


def profiled(profiles: dict[str, Path | list[Path]]) -> dict:
    """What a round's profile says of each kind: whole-model seconds per sample at microbatch 1
    (the pipelines') and 8 (data parallel's fast share), how many of its figures reached the
    precision target, and the quota it was held to (so a round that profiled fast can be explained)."""
    from results.planner.layer_costs import from_profile
    from results.planner.pooled import pooled
    out = {}
    for k, given in profiles.items():
        recs = kind_records(given)
        each = [from_profile(k, d) for d in recs]
        c = pooled(each)
        sums = [json.loads((d / "summary.json").read_text()) for d in recs]
        rows = [r for s in sums for rs in s["layers"].values() for r in rs]
        out[k] = {"sample_s_mb1": round(c.sample_s(1), 4), "sample_s_mb8": round(c.sample_s(8), 4),
                  "precise": f"{sum(r.get('ended_by') == 'precision' for r in rows)} of {len(rows)}",
                  "constraint": sums[0].get("constraint"), "record": ", ".join(d.name for d in recs),
                  **({"sample_s_mb1_per_record": [round(e.sample_s(1), 4) for e in each]} if len(each) > 1 else {})}
    return out


def kind_records(profile: Path | list[Path]) -> list[Path]:
    """A kind's profile records: one, or its two ranks' (seed_profiles.profile)."""
    return [Path(x) for x in profile] if isinstance(profile, (list, tuple)) else [Path(profile)]


def calibration_from(si: dict) -> dict[str, float]:
    """Each kind's calibration from an interleaved seed check (inventory `calibration`): its own
    job's step as run in the check over the step its plan priced. Both sides ran in the same
    process group, at once, so the kinds' factors share the machine's drift."""
    return {k: round(si["kind_steps_s"][k] / si["kind_steps_predicted_s"][k], 4) for k in si["kind_steps_s"]}


def calibrated_inventory(inv: Path, calibration: dict[str, float], out: Path | None = None) -> Path:
    """A copy of an inventory with each kind's calibration, at `out` (default: inv-<shape>...-r0.yaml's
    copy is inv-<shape>-cal...-r0.yaml)."""
    import yaml
    d = yaml.safe_load(inv.read_text())
    for dev in d["devices"]:
        dev["calibration"] = calibration[dev["kind"]]
    out = out or inv.with_name(inv.name.replace("inv-dp", "inv-dp-cal").replace("inv-pp", "inv-pp-cal"))
    out.write_text(yaml.safe_dump(d))
    return out
