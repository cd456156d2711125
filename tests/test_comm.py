"""The collectives benchmark (`python -m harness comm`): nccl-tests' figures, every collective
checked by value on gloo and MPI under real mpiexec at 2 and 4 ranks, records and their
ingest, corrupted data caught, a dead rank, and bad input."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from results.analysis import collectives as coll
from results.record import comm as comm_record
from results.record import schema
from tests.conftest import REPO, harness
from tests.helpers import MPIEXEC, mpirun as mpiexec

SMALL = ("-b", "8", "-e", "64K", "-f", "4", "-n", "3", "-w", "1")


def comm_dirs(env) -> list[Path]:
    return schema.record_dirs(Path(env["HARNESS_RESULTS"]) / comm_record.SUBDIR)


def records(env) -> dict[tuple[str, str, str], dict]:
    return {(r["config"]["collective"], r["config"]["backend"], r["config"]["dtype"]): r
            for r in (schema.read_record(d, with_metrics=True) for d in comm_dirs(env))}


# -- nccl-tests' figures ----------------------------------------------------------------------------
@pytest.mark.parametrize("collective,n,factor", [("all_reduce", 4, 1.5), ("all_reduce", 2, 1.0),
                                                  ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
                                                  ("all_to_all", 2, 0.5), ("broadcast", 4, 1.0),
                                                  ("reduce", 4, 1.0), ("send_recv", 4, 1.0)])
def test_busbw_is_algbw_times_the_nccl_tests_factor(collective, n, factor):
    algbw, busbw = comm_record.bandwidths(collective, 2_000_000_000, 0.5, n)  # 2 GB in 0.5 s
    assert algbw == pytest.approx(4.0) and busbw == pytest.approx(4.0 * factor)


def test_size_row_takes_the_slowest_ranks_mean_and_its_percentiles():
    times = [[1e-3] * 10, [1e-3] * 9 + [11e-3]]  # rank 1: mean 2 ms, one slow call
    row = comm_record.size_row("all_reduce", 1_000_000, 2, "ip", times)
    assert row["time_us_ip"] == pytest.approx(2000.0)
    assert row["algbw_gb_per_s_ip"] == pytest.approx(0.5) and row["busbw_gb_per_s_ip"] == pytest.approx(0.5)
    assert row["p50_us_ip"] == pytest.approx(1000.0) and row["p95_us_ip"] == pytest.approx(6500.0)
    assert row["rank_spread_ip"] == pytest.approx(2.0)


def test_sizes_and_size_parsing_follow_nccl_tests():
    from harness.comm.bench import parse_size
    from harness.comm.cases import elements
    assert comm_record.sizes(8, 64, 2) == [8, 16, 32, 64] and comm_record.sizes(8, 100, 4) == [8, 32]
    assert [parse_size(s) for s in ("8", "64K", "256M", "1G", "1.5K")] == [8, 65536, 256 * 2 ** 20, 2 ** 30, 1536]
    assert elements("all_gather", 8, 4, 4) == 0 and elements("all_gather", 40, 4, 4) == 8
    assert elements("all_reduce", 40, 4, 4) == 10


def test_predicted_time_interpolates_the_measured_sizes():
    rows = [{"bytes": 1000, "time_us_ip": 100.0}, {"bytes": 4000, "time_us_oop": 400.0, "time_us_ip": 200.0}]
    assert comm_record.time_at(rows, 1000) == pytest.approx(100e-6)
    assert comm_record.time_at(rows, 2000) == pytest.approx(100e-6 * 2 ** 0.5)  # log-log between 100 and 200 us
    assert comm_record.time_at(rows, 8000) == pytest.approx(400e-6)  # bandwidth-bound beyond the largest
    assert comm_record.time_at(rows, 10) == pytest.approx(100e-6)  # latency floor below the smallest
    total, parts = coll.predicted_comm_s(
        {"comm_all_reduce_calls_per_step": 3, "comm_all_reduce_bytes_per_step": 12000}, {"all_reduce": rows})
    assert total == pytest.approx(3 * 200e-6) and set(parts) == {"all_reduce"}
    missing, _ = coll.predicted_comm_s({"comm_all_gather_calls_per_step": 1, "comm_all_gather_bytes_per_step": 8},
                                       {"all_reduce": rows})
    assert missing is None  # a collective the benchmark did not measure: no prediction, not a low one


# -- real runs ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_every_collective_is_verified_on_gloo_and_mpi_and_recorded(env, ranks):
    dtypes = "float32,bfloat16" if ranks == 2 else "float32"
    factor = 4 if ranks == 2 else 16  # 4 ranks on 2 cores are oversubscribed: fewer sizes
    out = mpiexec(env, ranks, "-m", "harness", "comm", "-b", "8", "-e", "64K", "-f", str(factor), "-n", "3", "-w", "1",
                  "--dtypes", dtypes, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(env)
    for collective in comm_record.COLLECTIVES:
        for dtype in dtypes.split(","):
            nccl = recs[(collective, "nccl", dtype)]
            assert nccl["status"]["status"] == "unsupported" and "CUDA" in nccl["status"]["reason"]
            for backend in ("gloo", "mpi"):
                r = recs[(collective, backend, dtype)]
                if backend == "mpi" and dtype != "float32" and collective in ("all_reduce", "reduce_scatter", "reduce"):
                    assert r["status"]["status"] == "unsupported" and "MPI has no bfloat16" in r["status"]["reason"]
                    continue
                assert r["status"]["status"] == "finished", (collective, backend, r["status"])
                rows = [m for m in r["metrics"] if m["kind"] == "size"]
                measured = [m for m in rows if "skipped" not in m]
                assert [m["requested_bytes"] for m in rows] == comm_record.sizes(8, 65536, factor)
                assert measured and all(m["wrong"] == 0 for m in measured)
                for m in measured:
                    for mode in r["config"]["modes"]:  # each mode checked by value, its figures consistent
                        assert m[f"wrong_{mode}"] == 0
                        algbw, busbw = comm_record.bandwidths(collective, m["bytes"], m[f"time_us_{mode}"] / 1e6, ranks)
                        assert m[f"busbw_gb_per_s_{mode}"] == pytest.approx(busbw)
                        assert m[f"p50_us_{mode}"] <= m[f"p95_us_{mode}"]
                assert r["summary"]["busbw_gb_per_s"] > 0 and r["summary"]["copy_gb_per_s_rank"] > 0 < r["summary"]["copy_gb_per_s_all_cores"]
                assert r["config"]["ranks"] == ranks and r["env"]["hostname"]
    # ingested: one MLflow run per record, none in the training runs' index
    import results
    from results.store.tracking import default_tracking_uri
    uri = default_tracking_uri(Path(env["HARNESS_RESULTS"]))
    df = coll.load_comm(uri)
    assert sorted(df["run_id"]) == sorted(d.name for d in comm_dirs(env))
    assert results.load_runs(uri).empty
    again = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and f"0 added, {len(df)} already present" in again.stdout, again.stdout


CORRUPT = """import os
if os.environ.get("CORRUPT_RANK") == os.environ.get("PMI_RANK"):
    import torch, torch.distributed as td
    _orig = td.all_reduce
    def all_reduce(t, *a, **k):  # a faulty link: one element of every float all-reduce comes back wrong
        out = _orig(t, *a, **k)
        if t.is_floating_point():
            t.view(-1)[0] += 1
        return out
    td.all_reduce = all_reduce
"""


@pytest.mark.slow
def test_wrong_data_fails_the_record_instead_of_timing_it(env, tmp_path):
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(CORRUPT)
    e = {**env, "PYTHONPATH": f"{tmp_path / 'sc'}:{env['PYTHONPATH']}", "CORRUPT_RANK": "1"}
    out = mpiexec(e, 2, "-m", "harness", "comm", *SMALL, "--collectives", "all_reduce,broadcast",
                  "--backends", "gloo,mpi", "--no-ingest")
    assert out.returncode == 1, out.stderr[-2000:]
    recs = records(env)
    bad = recs[("all_reduce", "gloo", "float32")]
    assert bad["status"]["status"] == "failed" and bad["status"]["reason"].startswith("wrong data: 1 elements differ")
    assert len([m for m in bad["metrics"] if m["kind"] == "size"]) == 1  # stopped at the first wrong size
    for key in (("all_reduce", "mpi", "float32"), ("broadcast", "gloo", "float32")):
        assert recs[key]["status"]["status"] == "finished"  # the healthy ones still measured


SUICIDE = """import os, signal, threading
if os.environ.get("DIE_RANK") == os.environ.get("RANK"):
    threading.Timer(float(os.environ["DIE_AFTER"]), lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
"""


@pytest.mark.slow
def test_a_dead_rank_fails_the_open_record_in_bounded_time(env, tmp_path):
    """Launched as torchrun does (RANK/WORLD_SIZE, no MPI): MPI is unsupported with the reason,
    and when rank 1 dies, rank 0's next gloo call fails and it closes its record as failed."""
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(SUICIDE)
    e = {**env, "PYTHONPATH": f"{tmp_path / 'sc'}:{env['PYTHONPATH']}", "DIE_RANK": "1", "DIE_AFTER": "12",
         "HARNESS_DIST_TIMEOUT": "30", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29900 + os.getpid() % 90),
         "WORLD_SIZE": "2"}
    cmd = [sys.executable, "-m", "harness", "comm", "--collectives", "all_reduce", "--backends", "gloo,mpi",
           "-b", "1K", "-e", "64M", "-n", "200", "-w", "1", "--no-ingest"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, env={**e, "RANK": str(r)}, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    rc0 = procs[0].wait(timeout=180)
    procs[1].wait(timeout=30)
    assert rc0 == 1 and procs[1].returncode == -signal.SIGKILL and time.monotonic() - t0 < 150
    recs = records(env)
    mpi, gloo = recs[("all_reduce", "mpi", "float32")], recs[("all_reduce", "gloo", "float32")]
    assert mpi["status"]["status"] == "unsupported" and "not started by an MPI launcher" in mpi["status"]["reason"]
    assert gloo["status"]["status"] == "failed" and gloo["status"]["reason"].startswith("another rank died or hung")
    assert [m for m in gloo["metrics"] if m["kind"] == "size"]  # what was measured before is kept


# -- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,words", [
    (("--collectives", "allreduce"), "unknown collective allreduce; valid: all_reduce"),
    (("--backends", "ucx"), "unknown backend ucx; valid: gloo, mpi, nccl"),
    (("--dtypes", "int8"), "unknown dtype int8; valid: float32"),
    (("-b", "1M", "-e", "8"), "sizes out of order"),
    (("-b", "0"), "sizes must be positive"),
    (("-e", "lots"), "bad size 'lots'"),
    (("-f", "1"), "-f must be an integer of 2 or more"),
    (("--via", "pcie"), "unknown --via 'pcie'; valid: direct, host"),
    ((), "collectives need 2 or more ranks"),
])
def test_bad_input_is_one_line_and_exit_2(env, args, words):
    out = harness(env, "comm", *args, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and words in out.stderr, out.stderr
    assert not comm_dirs(env)


def test_nccl_without_gpus_is_one_line_and_exit_2(env):
    out = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "harness", "comm", "--backends", "nccl"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2 and lines == [
        "harness: error: backend nccl needs CUDA GPUs and torch sees none here; valid here: gloo, mpi"], out.stderr
    assert not comm_dirs(env)


STOP = """import os, signal, threading
if os.environ.get("STOP_RANK") == os.environ.get("PMI_RANK"):
    threading.Timer(float(os.environ["STOP_AFTER"]), lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
"""


@pytest.mark.slow
def test_a_hung_rank_under_mpiexec_fails_the_record_in_bounded_time(env, tmp_path):
    """Rank 1 stops (SIGSTOP: alive, silent) mid-benchmark. MPI calls have no timeout, so the
    watchdog (or gloo's timeout on the control plane) ends rank 0's wait: failed records, exit."""
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(STOP)
    e = {**env, "PYTHONPATH": f"{tmp_path / 'sc'}:{env['PYTHONPATH']}", "STOP_RANK": "1", "STOP_AFTER": "10",
         "HARNESS_DIST_TIMEOUT": "8"}
    t0 = time.monotonic()
    out = mpiexec(e, 2, "-m", "harness", "comm", "--collectives", "all_reduce", "--backends", "mpi",
                  "-b", "1K", "-e", "64M", "-n", "300", "-w", "1", "--no-ingest", timeout=150)
    assert out.returncode != 0 and time.monotonic() - t0 < 100, out.stderr[-2000:]
    (rec,) = records(env).values()
    assert rec["status"]["status"] == "failed" and rec["status"]["reason"].startswith("another rank died or hung")


def test_the_host_relay_is_checked_by_value_and_feeds_the_planners_relay_link(env):
    """`harness comm --via host`: each call copies to host buffers, runs the collective there and
    copies back; every result is checked by value against the same expected data as the direct
    path's, and the planner's host_relay link reads these records, the direct link the others."""
    from results.planner.inventory import Links
    from results.planner.links import LinkModel
    args = ("-m", "harness", "comm", *SMALL, "--collectives", "all_reduce,send_recv", "--backends", "gloo",
            "--no-ingest")
    for via in ("direct", "host"):
        out = mpiexec(env, 2, *args, "--via", via, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
    recs = [schema.read_record(d, with_metrics=True) for d in comm_dirs(env)]
    assert sorted((r["config"]["collective"], r["config"]["via"]) for r in recs) == [
        ("all_reduce", "direct"), ("all_reduce", "host"), ("send_recv", "direct"), ("send_recv", "host")]
    for r in recs:
        rows = [m for m in r["metrics"] if m["kind"] == "size" and "skipped" not in m]
        assert r["status"]["status"] == "finished" and rows and all(m["wrong"] == 0 for m in rows)
        assert ("via-host" in r["config"]["run_id"]) == (r["config"]["via"] == "host")
    links = LinkModel(Links(measured=True, backend="gloo"), Path(env["HARNESS_RESULTS"]))
    table = {(r["config"]["collective"], r["config"]["via"]): comm_record.table(Path(r["dir"])) for r in recs}
    assert links.send_s(65536, relay=True) == pytest.approx(comm_record.time_at(table[("send_recv", "host")], 65536))
    assert links.send_s(65536) == pytest.approx(comm_record.time_at(table[("send_recv", "direct")], 65536))
    assert links.all_reduce_s(65536, 2, relay=True) == pytest.approx(
        comm_record.time_at(table[("all_reduce", "host")], 65536))
