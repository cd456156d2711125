"""Node-local data staging (`python -m staging`) with real `mpiexec` (the mpich wheel), 2 and 4
ranks on this machine: each source file read once, reruns, bad input, copy workers, checksums,
O_DIRECT and a disk too small."""
from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, tiny_dataset
from workloads.manifest import read_manifest
from tests.helpers import MPIEXEC, mpirun as mpiexec


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
