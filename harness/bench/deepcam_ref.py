"""`make perf` deepcam_vs_reference: our DeepCAM step beside the MLPerf HPC reference's, same
config, interleaved in one process, with the function checked first.

The reference is mlcommons/hpc's deepcam/src/deepCam/architecture/deeplab_xception.py. It is
not part of this project (its code stays in its repository): point DEEPCAM_REFERENCE at that
file in a checkout, else the benchmark says it was skipped and why.

Per layout (NCHW, channels_last), in a child process of its own (torch 2.13's CPU strided 1x1
conv on channels_last has crashed; a crash is then a recorded result, not a lost benchmark):
- function: the reference's weights loaded into ours (the two register parameters in the same
  order but for the image-pooling affine), outputs compared in eval mode as
  the relative L2 difference (0 up to float rounding when the functions are the same);
- ops: per training step, the calls the issue named as overhead (pad, copy_, fill_,
  slice/narrow, out-of-place relu and add) for both models (harness/measure/op_counts.py);
- time: full width (the reference's channels), 16 x H x W input, the workload's AdamW, forward + loss +
  backward + step; steps alternate ours/reference with the order swapped every pair, the ratio
  is the median of per-pair ours/reference with a bootstrap CI (results/stats.paired_ratio).
  Below 1.0: ours is faster. The reference's image-pooling tile is set to the feature map's
  size (it hard-codes 48 x 72, the size for 768 x 1152 inputs).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ENV = "DEEPCAM_REFERENCE"
WATCHED = {"pad": ("aten::constant_pad_nd", "aten::pad"), "copy_": ("aten::copy_",), "fill_": ("aten::fill_",),
           "slice/narrow": ("aten::slice", "aten::narrow"), "relu (out of place)": ("aten::relu",),
           "add (out of place)": ("aten::add",)}


def reference_module(path: str | os.PathLike):
    spec = importlib.util.spec_from_file_location("deepcam_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_reference_weights(ours, ref) -> None:
    """Copy the reference's parameters and buffers into ours, in registration order (the same
    in both models but for image pooling, whose affine is the module's own parameter here, so
    listed before its conv); shapes must match."""
    import torch
    mine = dict(ours.state_dict())
    conv = mine.pop("image_pool.conv.weight")
    keys = list(mine)
    i = keys.index("image_pool.scale")
    mine = {k: mine.get(k, conv) for k in [*keys[:i], "image_pool.conv.weight", *keys[i:]]}
    theirs = ref.state_dict()
    if len(mine) != len(theirs):
        raise ValueError(f"{len(mine)} tensors here, {len(theirs)} in the reference")
    with torch.no_grad():
        for (k, a), (j, b) in zip(mine.items(), theirs.items()):
            if a.shape != b.shape:
                raise ValueError(f"{k} {tuple(a.shape)} vs reference {j} {tuple(b.shape)}")
            a.copy_(b)


def _models(ref_path: str, height: int, width: int):
    from harness.config import registry
    wl = registry.get("deepcam")
    size = wl.sizes["full"]
    ref = reference_module(ref_path).DeepLabv3_plus(n_input=size.in_channels, n_classes=size.n_classes,
                                                     os=16, _print=False)
    ref.bottleneck.tiles = (1, 1, height // 16, width // 16)
    ours = wl.build_model(size)
    load_reference_weights(ours, ref)
    return wl, ours, ref


def compare(ref_path: str, layout: str, height: int = 96, width: int = 144, batch: int = 2,
            steps: int = 12, warmup: int = 2) -> dict:
    """One layout's function check, op counts and paired step times (run in a child process)."""
    import torch
    from harness.measure import op_counts
    from results.stats import estimators as stats
    torch.manual_seed(0)
    wl, ours, ref = _models(ref_path, height, width)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.rand(batch, 16, height, width).to(memory_format=fmt)
    y = torch.randint(0, 3, (batch, height, width))
    out: dict = {"layout": layout, "input": [batch, 16, height, width]}
    with torch.no_grad():
        a, b = ours.eval()(x), ref.eval()(x)
    out["function_rel_l2"] = float((a - b).norm() / b.norm())
    ours.train().to(memory_format=fmt)
    ref.train().to(memory_format=fmt)
    size = wl.sizes["full"]  # the workload's own optimizer (AdamW, eps 1e-6) for both models
    opts = {name: wl.build_optimizer(m, size, batch, 1)[0] for name, m in (("ours", ours), ("reference", ref))}

    def step(name: str, m) -> float:
        t = time.perf_counter()
        wl.loss(m(x), y).backward()
        opts[name].step()
        opts[name].zero_grad(set_to_none=True)
        return time.perf_counter() - t

    ops = {}
    for name, m in (("ours", ours), ("reference", ref)):
        counts = op_counts.count(lambda: wl.loss(m(x), y).backward())
        m.zero_grad(set_to_none=True)
        ops[name] = {w: sum(counts.get(o, {}).get("calls", 0) for o in names) for w, names in WATCHED.items()}
    out["ops_per_step"] = ops
    times: dict[str, list[float]] = {"ours": [], "reference": []}
    for i in range(warmup + steps):
        order = (("ours", ours), ("reference", ref)) if i % 2 == 0 else (("reference", ref), ("ours", ours))
        for name, m in order:
            s = step(name, m)
            if i >= warmup:
                times[name].append(s)
    r = stats.paired_ratio(times["ours"], times["reference"])
    out.update(ours_over_reference=round(r["ratio"], 3), ci95=[round(r["ci_lo"], 3), round(r["ci_hi"], 3)],
               step_s={k: [round(v, 4) for v in vs] for k, vs in times.items()})
    return out


def deepcam_vs_reference(layouts: tuple = ("nchw", "channels_last")) -> dict:
    path = os.environ.get(ENV)
    if not path or not Path(path).is_file():
        return {"skipped": f"{ENV} is {'unset' if not path else 'not a file: ' + path}: set it to "
                           "deepcam/src/deepCam/architecture/deeplab_xception.py in a checkout of mlcommons/hpc"}
    res = {"reference": str(path)}
    for layout in layouts:
        code = ("import json, sys; from harness.bench.deepcam_ref import compare; "
                f"print(json.dumps(compare({str(path)!r}, {layout!r})))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[2])
        if p.returncode:
            tail = (p.stderr.strip().splitlines() or [""])[-1]
            res[layout] = {"crashed": f"exit {p.returncode}" + (f" (signal {-p.returncode})" if p.returncode < 0 else ""),
                           "stderr_tail": tail}
        else:
            res[layout] = json.loads(p.stdout.strip().splitlines()[-1])
    return res
