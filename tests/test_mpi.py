"""MPI data staging and data-parallel training with real `mpiexec` (the mpich wheel), 2 and 4
ranks on this machine."""
from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, harness, run_dirs, tiny_dataset
from workloads.manifest import read_manifest
from harness.parallel.dist import mpiexec

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup


def mpiexec(env, n: int, *args: str, timeout: float = 300, extra: tuple[str, ...] = ()):
    return subprocess.run([MPIEXEC, *extra, "-n", str(n), sys.executable, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def stage(env, n, source, local_root, *opts, report=None, extra=()):
    args = ["-m", "staging", str(source), str(local_root), *opts]
    if report:
        args += ["--report", str(report)]
    return mpiexec(env, n, *args, extra=extra)


def same_tree(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def source_reads(report: Path) -> Counter:
    rep = json.loads(report.read_text())
    return Counter(os.path.basename(os.path.dirname(f)) + "/" + os.path.basename(f)
                   for r in rep["ranks"] for f in r["opened"])


@pytest.fixture(scope="module")
def source(data_root) -> Path:
    return tiny_dataset(data_root, "cosmoflow")


def test_two_instances_of_two_ranks_read_each_file_once(env, source, tmp_path):
    local = tmp_path / "local"
    out = stage(env, 4, source, local, "--instance-size", "2", "--chunk-mb", "0.25", report=tmp_path / "r.json")
    assert out.returncode == 0, out.stderr
    reads = source_reads(tmp_path / "r.json")
    assert set(reads) == set(read_manifest(source)["files"]) and set(reads.values()) == {1}
    for k in (0, 1):
        assert same_tree(source, local / f"instance{k}")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["instances"] == 2 and summary["files_staged"] == 2 * len(reads)
    assert summary["bytes_read"] == sum(m["bytes"] for m in read_manifest(source)["files"].values())


def test_instance_spanning_two_nodes_gets_a_full_copy_per_node(env, source, tmp_path):
    """4 ranks in one instance on two (simulated) nodes: each node holds the whole dataset and
    each source file is still read once."""
    local = f"{tmp_path}/{{node}}"
    args = ["-m", "staging", str(source), local, "--report", str(tmp_path / "r.json")]
    cmd = [MPIEXEC, "-n", "2", "-env", "HARNESS_NODE", "nodeA", sys.executable, *args, ":",
           "-n", "2", "-env", "HARNESS_NODE", "nodeB", sys.executable, *args]
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert set(source_reads(tmp_path / "r.json").values()) == {1}
    for node in ("nodeA", "nodeB"):
        assert same_tree(source, tmp_path / node / "instance0")


# direct: "auto" takes the exchange path (O_DIRECT works on this ext4); "off" with one
# instance takes the kernel-copy path (staging/local_copy.py). Both must behave alike.
PATHS = pytest.mark.parametrize("direct", ["auto", "off"])


@PATHS
def test_rerun_after_interruption_stages_only_what_is_missing_or_wrong(env, source, tmp_path, direct):
    local = tmp_path / "local"
    assert stage(env, 2, source, local, "--direct", direct).returncode == 0
    copy = local / "instance0"
    names = sorted(read_manifest(source)["files"])
    (copy / names[0]).unlink()                                   # never written
    (copy / names[1]).write_bytes((copy / names[1]).read_bytes()[:100])  # cut short by the interruption
    (copy / f"{names[2]}.part").write_bytes(b"half")             # a partial write left behind
    untouched = copy / names[3]
    mtime = untouched.stat().st_mtime_ns
    out = stage(env, 2, source, local, "--direct", direct, report=tmp_path / "r.json")
    assert out.returncode == 0, out.stderr
    assert sorted(source_reads(tmp_path / "r.json")) == sorted(names[:2])
    rounds = [r["rounds"] for r in json.loads((tmp_path / "r.json").read_text())["ranks"]]
    assert (max(rounds) == 0) == (direct == "off")  # which path ran: kernel copies have no rounds
    assert json.loads(out.stdout.strip().splitlines()[-1])["files_staged"] == 2
    assert untouched.stat().st_mtime_ns == mtime and same_tree(source, copy)


@PATHS
def test_bad_source_and_bad_target_give_one_line_exit_2_and_keep_staged_files(env, source, tmp_path, direct):
    broken = tmp_path / "src"
    shutil.copytree(source, broken)
    local = tmp_path / "local"
    assert stage(env, 2, broken, local, "--direct", direct).returncode == 0
    victim = sorted(read_manifest(broken)["files"])[5]
    raw = bytearray((broken / victim).read_bytes())
    raw[200] ^= 0xFF
    (broken / victim).write_bytes(bytes(raw))                     # same size, wrong bytes
    (local / "instance0" / victim).unlink()
    out = stage(env, 2, broken, local, "--direct", direct)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "checksum mismatch" in out.stderr and victim in out.stderr
    assert len(list((local / "instance0").rglob("*.npy"))) == len(read_manifest(broken)["files"]) - 1

    (broken / victim).unlink()
    out = stage(env, 2, broken, local, "--direct", direct)
    assert out.returncode == 2 and victim in out.stderr and out.stderr.strip().count("\n") == 0

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = stage(env, 2, source, blocker / "sub", "--direct", direct)
    assert out.returncode == 2 and "not writable" in out.stderr and str(blocker) in out.stderr


def test_copy_workers_stage_every_good_file_once_and_name_the_bad(source, tmp_path):
    """The kernel-copy path's workers (staging/local_copy.py), 3 of them whatever this machine
    has: every file read once, each good one verified and in place, a corrupt and a missing
    source file named, no `.part` left; and one rank of `python -m staging` uses its cores."""
    from staging.local_copy import LocalCopier, node_threads
    broken = tmp_path / "src"
    shutil.copytree(source, broken)
    meta = read_manifest(broken)["files"]
    names = sorted(meta)
    raw = bytearray((broken / names[4]).read_bytes())
    raw[100] ^= 0xFF
    (broken / names[4]).write_bytes(bytes(raw))   # same size, wrong bytes
    (broken / names[9]).unlink()
    dest = tmp_path / "dest"
    copier = LocalCopier(broken, dest, meta, threads=3)
    copier.run(names)
    assert sorted(Counter(copier.opened).values()) == [1] * (len(names) - 1)  # the missing one never opened
    assert len(copier.errors) == 2 and any(names[4] in e and "checksum mismatch" in e for e in copier.errors)
    assert any(names[9] in e and "cannot read source file" in e for e in copier.errors)
    assert copier.files == len(names) - 2 and not list(dest.rglob("*.part"))
    for n in names:
        assert (dest / n).exists() == (n not in (names[4], names[9]))
        if (dest / n).exists():
            assert (dest / n).read_bytes() == (source / n).read_bytes()
    assert node_threads(1) == len(os.sched_getaffinity(0)) and node_threads(10 ** 6) == 1
    out = stage(os.environ.copy(), 1, source, tmp_path / "local", "--direct", "off")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["copy_threads"] == node_threads(1)
    assert same_tree(source, tmp_path / "local" / "instance0")


def test_manifest_checksum_is_zlibs_crc32_computed_by_isal(tmp_path):
    """The manifest's and the stager's CRC-32 comes from ISA-L (a dependency: ~6x zlib's here)
    and is zlib's checksum: whole, streamed in pieces with the running value (as the stager
    does), and over a file (manifests written with zlib's stay valid)."""
    import os
    import zlib
    from isal import isal_zlib
    from workloads import manifest
    assert manifest.crc32 is isal_zlib.crc32
    data = os.urandom(3 << 20) + b"tail"
    whole = zlib.crc32(data)
    assert manifest.crc32(data) == whole
    running = 0
    for i in range(0, len(data), 1 << 20):
        running = manifest.crc32(data[i:i + (1 << 20)], running)
    assert running == whole
    (tmp_path / "f").write_bytes(data)
    assert manifest.file_crc32(tmp_path / "f") == (len(data), whole)
    assert manifest.checksum(tmp_path / "f") == f"crc32:{whole:08x}"


def test_o_direct_falls_back_where_the_filesystem_refuses_it(tmp_path, monkeypatch):
    """tmpfs here accepts O_DIRECT (kernel >= 6.6), so the refusal other filesystems give is
    injected at os.open; the bytes must be the same either way."""
    from staging.direct_io import RangeReader
    blob = os.urandom(3 * 4096 + 123)
    path = tmp_path / "f.bin"
    path.write_bytes(blob)
    buf = memoryview(mmap.mmap(-1, 4 * 4096))

    direct = RangeReader("auto")
    assert direct.read(str(path), 4096, len(blob) - 4096, buf) == len(blob) - 4096
    assert bytes(buf[:len(blob) - 4096]) == blob[4096:] and direct.mode == "direct"

    real_open = os.open

    def refuse_direct(p, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(p, flags, *a)

    monkeypatch.setattr(os, "open", refuse_direct)
    fallback = RangeReader("auto")
    assert fallback.read(str(path), 0, len(blob), buf) == len(blob) and bytes(buf[:len(blob)]) == blob
    assert fallback.mode == "buffered" and "EINVAL" in fallback.fallback_reason
    with pytest.raises(OSError):
        RangeReader("on").read(str(path), 0, 10, buf)


def _losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "step"]


def test_two_rank_ddp_matches_one_rank_with_the_same_global_batch(env, tmp_path):
    """Same global batch, same seed: DDP's averaged gradients equal the one-rank gradients, so
    the loss curves agree (float reduction order aside). The 2-rank run also stages its data."""
    sets = ["--set", "steps=6", "--set", "warmup_steps=1"]
    one = harness(env, "run", "lm", "--no-ingest", *sets)
    assert one.returncode == 0, one.stderr
    env2 = {**env, "HARNESS_STAGE_DIR": str(tmp_path / "stage")}
    two = mpiexec(env2, 2, "-m", "harness", "run", "lm", "--no-ingest", *sets, "--set", "toggles.mpi_staging=true")
    assert two.returncode == 0, two.stderr
    runs = run_dirs(env)
    assert len(runs) == 2  # rank 1 wrote no record
    by_world = {json.loads((r / "summary.json").read_text())["world"]: r for r in runs}
    assert _losses(by_world[2]) == pytest.approx(_losses(by_world[1]), rel=1e-4)
    s2 = json.loads((by_world[2] / "summary.json").read_text())
    assert s2["staging"]["files_staged"] > 0 and s2["staged_dir"].startswith(str(tmp_path / "stage"))
    assert json.loads((by_world[2] / "config.json").read_text())["ranks"] == 2
    rows = [json.loads(x) for x in (by_world[2] / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r["kind"] == "step")
    assert step["step_s"] == max(step["rank_step_s"]) and len(step["rank_step_s"]) == 2
    log = (by_world[2] / "mlperf.log").read_text()
    assert '"key": "staging_start"' in log and '"key": "staging_stop"' in log


SUICIDE = """import os, signal, threading
if os.environ.get("DIE_RANK") == os.environ.get("RANK", os.environ.get("PMI_RANK")):
    threading.Timer(float(os.environ["DIE_AFTER"]), lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
"""


def _doomed_env(env, tmp_path, die_after: float) -> dict:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(SUICIDE)
    return {**env, "PYTHONPATH": f"{tmp_path / 'sc'}:{env['PYTHONPATH']}", "DIE_RANK": "1",
            "DIE_AFTER": str(die_after), "HARNESS_DIST_TIMEOUT": "30"}


def test_a_dead_rank_under_mpiexec_ends_the_job_and_leaves_a_failed_record(env, tmp_path):
    """mpiexec SIGKILLs the surviving ranks when one dies, so rank 0 cannot close its record;
    the next ingest finds the orphan and closes it as failed."""
    e = _doomed_env(env, tmp_path, 8)
    t0 = time.monotonic()
    out = mpiexec(e, 2, "-m", "harness", "run", "lm", "--no-ingest", "--set", "steps=2000", timeout=120)
    assert out.returncode != 0 and time.monotonic() - t0 < 60
    ing = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert ing.returncode == 0, ing.stderr
    (run,) = run_dirs(env)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"]


def test_a_dead_rank_without_launcher_cleanup_makes_rank_0_fail_its_record(env, tmp_path):
    """srun (no --kill-on-bad-exit) leaves the survivors running: rank 0's next collective
    fails, and it writes a failed record itself, in bounded time."""
    e = {**_doomed_env(env, tmp_path, 8), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29700 + os.getpid() % 200),
         "WORLD_SIZE": "2"}
    cmd = [sys.executable, "-m", "harness", "run", "lm", "--no-ingest", "--set", "steps=2000"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, env={**e, "RANK": str(r)}, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    rc0 = procs[0].wait(timeout=120)
    procs[1].wait(timeout=30)
    assert rc0 == 1 and time.monotonic() - t0 < 90
    (run,) = run_dirs(env)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"].startswith("another rank died or hung")


def test_a_local_disk_too_small_is_refused_before_any_copy(env, source, tmp_path):
    """A 1 MiB tmpfs as the node-local disk (two ranks, one node): one line, exit 2, the disk
    left as it was rather than filled to 100% with verified copies."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        free = shutil.disk_usage(disk).free
        out = stage(env, 2, source, disk)
        assert out.returncode == 2
        (line,) = out.stderr.strip().splitlines()
        need = sum(m["bytes"] for m in read_manifest(source)["files"].values())
        assert line == (f"staging: error: node-local disk of {disk}/instance0 ({os.uname().nodename}) has "
                        f"{free / 1e6:.1f} MB free; staging needs {need / 1e6:.1f} MB more for "
                        f"{len(read_manifest(source)['files'])} files; nothing was copied (free space or choose "
                        "another LOCAL_ROOT)")
        assert [p.name for p in (disk / "instance0").iterdir()] == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)
