"""The device inventory the heterogeneous planner reads (YAML), checked field by field.

    devices:
      - kind: full-core          # a name
        count: 1                 # devices of this kind (>= 1)
        memory_gb: 4             # memory per device
        profile: results/profiles/profile-lm-small-cpus1.0-...   # measured (harness profile; or a list of
                                 #   records, this kind's devices profiled at once: averaged), or
      - kind: H100
        count: 500
        memory_gb: 80
        peak_tflops: 989         # vendor peak (dense bf16) ...
        efficiency: 0.45         # ... times an assumed efficiency: an ESTIMATE, said so in every plan
        library: nccl            # its collective library (optional): kinds whose libraries differ share
                                 #   no native path, so their traffic takes the host relay (below)
        node_size: 8             # devices per node (optional, default 1): tensor and context parallel
                                 #   groups are searched within a node (results/planner/within_stage.py)
        node_busbw_gb_per_s: 370 # the node's collective bus bandwidth (optional, an estimate, e.g.
                                 #   NVLink4's ring all-reduce); without it, the links below
        calibration: 1.02        # optional: this kind's own job measured over its price, from a run;
                                 #   its compute, optimizer and gradient copies are priced that much
                                 #   slower (1.02) or faster (Costs.scaled)
    links:                       # how long collectives and sends take between the devices
      collectives: measured      # the newest collectives records under results/comm (busbw and
      backend: gloo              #   latency by size: harness comm), or an estimate:
      # busbw_gb_per_s: 25
      # latency_us: 10
      # pcie_gb_per_s: 25        # device <-> host copies of the host relay, when no `harness comm
                                 #   --via host` records are there to measure it
      # overlap: true            # DDP's all-reduce hides behind the backward (default: not on links
                                 #   measured with gloo, whose threads share the ranks' CPUs; yes otherwise)
      # kinds:                   # collectives among one kind's devices alone, measured on them: the
      #   full-core: results/a   #   newest records under that results root's comm/ (harness comm run on
                                 #   that kind's ranks); groups of mixed kinds use the records above
    optimizer_sharded: false     # ZeRO-1 over the data-parallel replicas (model state 4 + 12/dp B/param)

Any other field, a count or memory that is not positive, a profile that does not exist or an
estimate without both numbers is a PlanError: one line, exit 2 at the CLI.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from results.record import comm as comm_record
from results.record import schema

MAX_BYTES = 1 << 20  # an inventory is a few lines; refuse anything that could be an alias bomb
DEVICE_FIELDS = ("kind", "count", "memory_gb", "profile", "peak_tflops", "efficiency", "library", "node_size",
                 "node_busbw_gb_per_s", "calibration")
LINK_FIELDS = ("collectives", "backend", "busbw_gb_per_s", "latency_us", "pcie_gb_per_s", "overlap", "kinds")
TOP_FIELDS = ("devices", "links", "optimizer_sharded")


class PlanError(ValueError):
    """Bad inventory or planner input: one line naming the problem (exit 2)."""


@dataclass(frozen=True)
class DeviceKind:
    kind: str
    count: int
    memory_bytes: float
    # measured profile records' folders: one, or several of this kind's devices profiled at once,
    # their figures averaged (results/planner/pooled.py); empty for an estimate
    profiles: tuple[Path, ...] = ()
    peak_flop_s: float | None = None  # vendor peak x assumed efficiency (an estimate)
    efficiency: float | None = None
    library: str | None = None       # collective library; None: shares one with every kind
    node_size: int = 1               # devices per node: tensor/context groups stay inside one
    node_busbw_gb_per_s: float | None = None  # the node's bus bandwidth (estimate); None: the inventory's links
    calibration: float = 1.0         # this kind's run over its price (layer_costs.Costs.scaled); 1: as profiled


@dataclass(frozen=True)
class Links:
    measured: bool
    backend: str = "gloo"
    busbw_gb_per_s: float | None = None
    latency_us: float | None = None
    pcie_gb_per_s: float | None = None  # the host relay's device <-> host copies (an estimate)
    # whether DDP's bucketed all-reduce hides behind the backward. Not with gloo on CPU ranks: its
    # threads run on the CPUs the compute runs on (measured, `make perf` ddp_overlap, its "held"
    # figures, 2026-12-03: at 0.25 CPU a rank overlap gained 3.3% where the model that hides it
    # predicted 7.5%; unheld 3.5% against 8.6%: it hides under half of what the model hides).
    # None: no for links measured on gloo, yes otherwise (an estimate stands for NCCL-like links);
    # the inventory may say either way
    overlap: bool | None = None
    # (kind, results root): collectives among that kind's devices alone are priced from the comm
    # records measured on them there. Why: on gloo the ranks' own CPUs do the reduction, so a
    # collective among slow ranks is slower: LM small's 43.8 MB all-reduce on 2 ranks took 0.060-0.065 s
    # at 0.5 CPU each and 0.127-0.132 s at 0.25, where the four held ranks' record priced both at
    # 0.102-0.122 s (2026-12-05, Xeon, three rounds). On a cluster: each kind's own interconnect
    kinds: tuple[tuple[str, Path], ...] = ()

    @property
    def overlaps(self) -> bool:
        return not (self.measured and self.backend == "gloo") if self.overlap is None else self.overlap


@dataclass(frozen=True)
class Inventory:
    devices: tuple[DeviceKind, ...]
    links: Links
    optimizer_sharded: bool = False
    source: str = ""


def _positive(where: str, name: str, value, integer: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
    if integer:
        ok = ok and isinstance(value, int)
    if not ok:
        raise PlanError(f"{where}: {name} must be a {'whole number' if integer else 'number'} > 0; got {value!r}")
    return value


def _calibration(where: str, dev: dict) -> float:
    """A kind's calibration: a finite factor > 0 (its own job's measured step over its priced one)."""
    if "calibration" not in dev:
        return 1.0
    got = _positive(where, "calibration", dev["calibration"])
    if not math.isfinite(got):
        raise PlanError(f"{where}: calibration must be a finite number > 0 (measured over priced); got {got!r}")
    return float(got)


def _unknown(where: str, d: dict, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(d) - set(allowed))
    if extra:
        raise PlanError(f"{where}: unknown field {extra[0]!r}; valid: {', '.join(allowed)}")


def _profiles(where: str, given: object, base: Path | None) -> tuple[Path, ...]:
    """A device kind's profile records: one path, or a list of them (its devices profiled at once,
    pooled: results/planner/pooled.py), each relative to the inventory's folder unless absolute."""
    items = given if isinstance(given, list) else [given]
    if not items or len(items) > 64 or not all(isinstance(x, (str, Path)) and str(x) for x in items):
        raise PlanError(f"{where}: profile must be a profile record's folder or a list of 1-64 of them; got {given!r}")
    paths = []
    for x in items:
        path = Path(str(x))
        path = path if path.is_absolute() or base is None else base / path
        if not (path / schema.SUMMARY).exists():
            raise PlanError(f"{where}: profile {x} is not a profile record (harness profile writes them)")
        paths.append(path)
    return tuple(paths)


def _library(where: str, dev: dict) -> str | None:
    lib = dev.get("library")
    if lib is not None and (not isinstance(lib, str) or not lib.strip()):
        raise PlanError(f"{where}: library must be a name (nccl, rccl, hccl ...); got {lib!r}")
    return lib


def _node(where: str, dev: dict) -> dict:
    out = {}
    if "node_size" in dev:
        out["node_size"] = int(_positive(where, "node_size", dev["node_size"], integer=True))
    if "node_busbw_gb_per_s" in dev:
        out["node_busbw_gb_per_s"] = _positive(where, "node_busbw_gb_per_s", dev["node_busbw_gb_per_s"])
    return out


def relay_between(a: DeviceKind, b: DeviceKind) -> bool:
    """Whether traffic between these kinds takes the host relay: both name a collective library
    and the libraries differ (a kind naming none is taken to share the other's)."""
    return a.library is not None and b.library is not None and a.library != b.library


def parse(d, source: str = "", base: Path | None = None) -> Inventory:
    if not isinstance(d, dict):
        raise PlanError(f"{source}: an inventory is a mapping with {', '.join(TOP_FIELDS)}")
    _unknown(source, d, TOP_FIELDS)
    raw = d.get("devices")
    if not isinstance(raw, list) or not raw:
        raise PlanError(f"{source}: devices must be a non-empty list of device kinds")
    devices = []
    for n, dev in enumerate(raw):
        where = f"{source}: devices[{n}]"
        if not isinstance(dev, dict):
            raise PlanError(f"{where} must be a mapping with {', '.join(DEVICE_FIELDS)}")
        _unknown(where, dev, DEVICE_FIELDS)
        if not isinstance(dev.get("kind"), str) or not dev["kind"]:
            raise PlanError(f"{where}: kind must be a name")
        count = _positive(where, "count", dev.get("count"), integer=True)
        mem = _positive(where, "memory_gb", dev.get("memory_gb")) * 1e9
        if "profile" in dev:
            if "peak_tflops" in dev or "efficiency" in dev:
                raise PlanError(f"{where}: give a measured profile or a peak_tflops estimate, not both")
            devices.append(DeviceKind(dev["kind"], count, mem, profiles=_profiles(where, dev["profile"], base),
                                      library=_library(where, dev), calibration=_calibration(where, dev),
                                      **_node(where, dev)))
        else:
            peak = _positive(where, "peak_tflops", dev.get("peak_tflops"))
            eff = _positive(where, "efficiency", dev.get("efficiency"))
            if eff > 1:
                raise PlanError(f"{where}: efficiency is a fraction of peak (0 < e <= 1); got {eff}")
            devices.append(DeviceKind(dev["kind"], count, mem, peak_flop_s=peak * 1e12 * eff, efficiency=eff,
                                      library=_library(where, dev), calibration=_calibration(where, dev),
                                      **_node(where, dev)))
    if len({dv.kind for dv in devices}) != len(devices):
        raise PlanError(f"{source}: device kinds must be distinct")
    links = d.get("links") or {"collectives": "measured"}
    if not isinstance(links, dict):
        raise PlanError(f"{source}: links must be a mapping with {', '.join(LINK_FIELDS)}")
    _unknown(f"{source}: links", links, LINK_FIELDS)
    if links.get("collectives") == "measured":
        lk = Links(measured=True, backend=str(links.get("backend", "gloo")))
    elif "collectives" in links:
        raise PlanError(f"{source}: links.collectives must be 'measured' (or give busbw_gb_per_s and latency_us)")
    else:
        lk = Links(measured=False, busbw_gb_per_s=_positive(f"{source}: links", "busbw_gb_per_s", links.get("busbw_gb_per_s")),
                   latency_us=_positive(f"{source}: links", "latency_us", links.get("latency_us")))
    if "pcie_gb_per_s" in links:
        lk = replace(lk, pcie_gb_per_s=_positive(f"{source}: links", "pcie_gb_per_s", links["pcie_gb_per_s"]))
    if "overlap" in links:
        if not isinstance(links["overlap"], bool):
            raise PlanError(f"{source}: links.overlap must be true or false; got {links['overlap']!r}")
        lk = replace(lk, overlap=links["overlap"])
    if "kinds" in links:
        lk = replace(lk, kinds=_kind_links(f"{source}: links.kinds", links["kinds"], lk, devices, base))
    sharded = d.get("optimizer_sharded", False)
    if not isinstance(sharded, bool):
        raise PlanError(f"{source}: optimizer_sharded must be true or false; got {sharded!r}")
    return Inventory(tuple(devices), lk, sharded, source)


def _kind_links(where: str, given, lk: Links, devices: list[DeviceKind], base: Path | None) -> tuple:
    if not lk.measured:
        raise PlanError(f"{where}: a kind's own links are measured records; these links are an estimate")
    if not isinstance(given, dict) or not given:
        raise PlanError(f"{where} must map device kinds to results folders with comm records")
    names = [d.kind for d in devices]
    out = []
    for kind, folder in given.items():
        if kind not in names:
            raise PlanError(f"{where}: {kind!r} is not a device kind here; kinds: {', '.join(names)}")
        if not isinstance(folder, str) or not folder:
            raise PlanError(f"{where}: {kind}'s folder must be a path; got {folder!r}")
        path = Path(folder)
        path = path if path.is_absolute() or base is None else base / path
        if not (path / comm_record.SUBDIR).is_dir():
            raise PlanError(f"{where}: {folder} has no {comm_record.SUBDIR}/ folder (harness comm writes one)")
        out.append((kind, path))
    return tuple(out)


def load(path: Path) -> Inventory:
    import yaml
    try:
        if path.stat().st_size > MAX_BYTES:
            raise PlanError(f"{path}: {path.stat().st_size} bytes; an inventory is at most {MAX_BYTES}")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"cannot read inventory {path}: {type(e).__name__}") from None
    try:
        if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(text)):
            raise PlanError(f"{path}: YAML aliases are not accepted in an inventory")
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PlanError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return parse(d, str(path), base=Path.cwd())
