"""Property-based: whatever a user types or a file holds, the parsers answer with the project's
own one-line errors (UsageError, or PlanError for inventories) and nothing else: `--set`
assignments, sweep files, site files, device inventories. Cases Hypothesis found are kept as
@example lines (the corpus), so they are retried on every run."""
from __future__ import annotations

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.config.errors import UsageError
from harness.config.run_config import RunConfig, settable_keys
from results.planner.inventory import PlanError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KEYS = st.sampled_from(settable_keys()) | st.text(max_size=20)
VALUES = (st.text(max_size=30) | st.integers().map(str) | st.floats().map(str) |
          st.sampled_from(["true", "false", "nan", "inf", "-1", "0", "1e400", "bf16", "", "=", "1,2", "[1]"]))
YAML_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=10), kids, max_size=3),
                           max_leaves=10)


@FAST
@given(pairs=st.lists(st.tuples(KEYS, VALUES), max_size=4), raw=st.lists(st.text(max_size=30), max_size=2))
@example(pairs=[("threads", "100000")], raw=[])   # segfaulted torch's thread pool before the bound
@example(pairs=[("parallel.tp", "0")], raw=[])
@example(pairs=[], raw=["=="])
def test_set_assignments_give_a_config_or_a_usage_error(pairs, raw):
    base = RunConfig(workload="lm")
    try:
        cfg = base.with_overrides([f"{k}={v}" for k, v in pairs] + raw)
    except UsageError as e:
        assert "\n" not in str(e).strip() or len(str(e)) < 2000
    else:
        assert isinstance(cfg, RunConfig)


def _write(tmp_path_factory, doc, raw: bytes | None) -> object:
    p = tmp_path_factory.mktemp("fuzz") / "f.yaml"
    if raw is not None:
        p.write_bytes(raw)
    else:
        p.write_text(yaml.safe_dump(doc))
    return p


SWEEP_DOCS = st.fixed_dictionaries({}, optional={
    "name": YAML_VALUES | st.just("ok"), "workloads": YAML_VALUES | st.just(["lm"]),
    "sizes": YAML_VALUES | st.just(["tiny"]), "repeats": YAML_VALUES | st.integers(-2, 3),
    "toggles": YAML_VALUES | st.just(["amp"]), "matrix": YAML_VALUES | st.just(["baseline"]),
    "base": YAML_VALUES | st.just({"steps": 2}), "parallel": YAML_VALUES, "ranks": YAML_VALUES,
    "on_values": YAML_VALUES,
    "top_up": YAML_VALUES | st.fixed_dictionaries({}, optional={
        "precision": YAML_VALUES | st.floats(-1, 2), "max_repeats": YAML_VALUES | st.integers(-1, 6),
        "budget_s": YAML_VALUES | st.floats(allow_nan=True)})}) | YAML_VALUES


@FAST
@given(doc=SWEEP_DOCS, raw=st.none() | st.binary(max_size=60))
@example(doc={"name": "x@y", "workloads": ["lm"]}, raw=None)
@example(doc={}, raw=b"?")  # YAML's `?` is a mapping with a null key: found by CI's fuzzing (2026-12-04)
@example(doc={"name": "x" * 10_000, "workloads": ["lm"]}, raw=None)
def test_sweep_files_give_a_sweep_or_a_usage_error(tmp_path_factory, doc, raw):
    from harness.experiments import sweep
    try:
        sw = sweep.load(_write(tmp_path_factory, doc, raw))
        sweep.plan_cells(sw, "cpu", 1)  # a loaded sweep also plans its cells, or says why
    except UsageError:
        pass


SITE_DOCS = st.fixed_dictionaries({}, optional={
    "scheduler": YAML_VALUES | st.sampled_from(["slurm", "local"]), "partition": YAML_VALUES | st.just("debug"),
    "nodes": YAML_VALUES | st.integers(-1, 3), "ntasks_per_node": YAML_VALUES | st.integers(-1, 3),
    "launcher": YAML_VALUES | st.sampled_from(["srun", "mpiexec"]), "tracking_uri": YAML_VALUES,
    "gpus_per_node": YAML_VALUES, "results_dir": YAML_VALUES}) | YAML_VALUES


@FAST
@given(doc=SITE_DOCS, raw=st.none() | st.binary(max_size=60))
def test_site_files_give_a_site_or_a_usage_error(tmp_path_factory, doc, raw):
    from harness.launch import site
    try:
        site.load(str(_write(tmp_path_factory, doc, raw)))
    except UsageError:
        pass


DEVICE = st.fixed_dictionaries({}, optional={
    "kind": YAML_VALUES | st.just("a"), "count": YAML_VALUES | st.integers(-1, 4),
    "memory_gb": YAML_VALUES | st.floats(-1, 100), "peak_tflops": YAML_VALUES | st.floats(-1, 1000),
    "efficiency": YAML_VALUES | st.floats(-1, 2), "profile": YAML_VALUES})
INVENTORY = st.fixed_dictionaries({}, optional={
    "devices": st.lists(DEVICE, max_size=3) | YAML_VALUES,
    "links": st.fixed_dictionaries({}, optional={"busbw_gb_per_s": YAML_VALUES, "latency_us": YAML_VALUES}) | YAML_VALUES,
    "optimizer_sharded": YAML_VALUES}) | YAML_VALUES


@FAST
@given(doc=INVENTORY, raw=st.none() | st.binary(max_size=60))
def test_inventories_give_an_inventory_or_a_plan_error(tmp_path_factory, doc, raw):
    from results.planner import inventory
    try:
        inventory.load(_write(tmp_path_factory, doc, raw))
    except PlanError:
        pass
