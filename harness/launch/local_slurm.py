"""A real single-node Slurm on loopback, for the test suite and for trying `make submit` on a
laptop or CI box: Debian's slurmctld, slurmd, slurm-client and munge (needs root).

    python -m harness.launch.local_slurm up       install if missing, configure, start, wait idle
    python -m harness.launch.local_slurm down     stop only the daemons `up` started (own PID files)
    python -m harness.launch.local_slurm status

Traps this avoids (learned the hard way on 2-vCPU VMs without systemd):
- apt's postinst would start the daemons with the packaged config: a policy-rc.d refuses that.
- srun binds to whatever the host name resolves to, so the host name must resolve.
- `MpiDefault=pmi2`: with `--mpi=none`, srun silently starts N separate size-1 MPI jobs.
- More tasks than CPUs wait forever unless the job overcommits: jobs here ask for what exists.
- No slurmdbd: job completions go to a jobcomp/filetxt log, read with `sacct -c`.
- Daemons are stopped by the PIDs in our own pid files, never by name: a foreign munged or
  slurmd on the machine is left alone.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

RUN = Path("/run/harness-slurm")
SPOOL = Path("/var/spool/harness-slurm")
LOGS = Path("/var/log/harness-slurm")
CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by harness.launch.local_slurm"
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}
PARTITION = "debug"


class SlurmSetupError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[local_slurm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _alive(pidfile: Path, comm: str) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().strip() == comm and \
            "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except (OSError, ValueError):
        return False


def _wait(what: str, ok, seconds: float = 60) -> None:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > seconds:
            raise SlurmSetupError(f"{what} not ready after {seconds:.0f} s (logs in {LOGS})")
        time.sleep(0.2)


def install() -> None:
    missing = sorted({pkg for exe, pkg in PACKAGES.items() if not shutil.which(exe)
                      and not Path(f"/usr/sbin/{exe}").exists()})
    if not missing:
        return
    _log(f"apt-get install {' '.join(missing)}")
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:  # keep the packages' postinst from starting daemons with the stock config
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                       check=True, env=env, capture_output=True)
    finally:
        if ours:
            policy.unlink(missing_ok=True)


def slurm_conf() -> str:
    hw = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    if not hw.startswith("NodeName=") or "RealMemory=" not in hw:
        raise SlurmSetupError(f"unexpected `slurmd -C` output: {hw}")
    node = "NodeName=localhost " + hw.split(" ", 1)[1]  # the real topology, so the node never drains
    return f"""{MARK}
ClusterName=harness
SlurmctldHost=localhost
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={LOGS}/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MaxArraySize=1001
StateSaveLocation={SPOOL}/ctld
SlurmdSpoolDir={SPOOL}/d
SlurmctldPidFile={RUN}/slurmctld.pid
SlurmdPidFile={RUN}/slurmd.pid
SlurmctldLogFile={LOGS}/slurmctld.log
SlurmdLogFile={LOGS}/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
{node} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _munge_ok() -> bool:
    p = subprocess.run("munge -n | unmunge", shell=True, capture_output=True)
    return p.returncode == 0


def _start_munge() -> None:
    if _alive(RUN / "munged.pid", "munged") or _munge_ok():
        return
    key = Path("/etc/munge/munge.key")
    if not key.exists() or key.stat().st_size == 0:
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
    for d, mode in ((key.parent, 0o700), (Path("/run/munge"), 0o755), (Path("/var/log/munge"), 0o700),
                    (Path("/var/lib/munge"), 0o700)):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        d.chmod(mode)
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
    shutil.copy("/run/munge/munged.pid", RUN / "munged.pid")
    _wait("munged", _munge_ok, 15)


def _node_state() -> str:
    p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return " ".join(sorted(set(p.stdout.split()))) if p.returncode == 0 else ""


def up(timeout: float = 90) -> None:
    if os.geteuid() != 0:
        raise SlurmSetupError("starting a local Slurm needs root (it runs munged, slurmctld and slurmd)")
    install()
    host = socket.gethostname()
    try:
        socket.gethostbyname(host)
    except OSError:
        with open("/etc/hosts", "a") as f:
            f.write(f"127.0.0.1 {host}\n")
    for d in (RUN, SPOOL / "ctld", SPOOL / "d", LOGS):
        d.mkdir(parents=True, exist_ok=True)
    text = slurm_conf()
    if CONF.exists() and MARK not in CONF.read_text():
        raise SlurmSetupError(f"{CONF} exists and was not written by this tool; not overwriting it")
    changed = not CONF.exists() or CONF.read_text() != text
    if changed:
        CONF.parent.mkdir(parents=True, exist_ok=True)
        CONF.write_text(text)
        _stop(RUN / "slurmd.pid", "slurmd")  # restart with the new config
        _stop(RUN / "slurmctld.pid", "slurmctld")
    _start_munge()
    if not _alive(RUN / "slurmctld.pid", "slurmctld"):
        _log("starting slurmctld")
        subprocess.run(["/usr/sbin/slurmctld", "-i"], check=True)
    if not _alive(RUN / "slurmd.pid", "slurmd"):
        _log("starting slurmd")
        subprocess.run(["/usr/sbin/slurmd"], check=True)
    t0, resumed = time.monotonic(), False

    def idle() -> bool:
        nonlocal resumed
        st = _node_state()
        if any(s in st for s in ("down", "drain", "fail")) and not resumed and time.monotonic() - t0 > 3:
            subprocess.run(["scontrol", "update", "nodename=localhost", "state=resume"], capture_output=True)
            resumed = True
        return st == "idle" or st == "mix" or st == "alloc"

    _wait("the Slurm node", idle, timeout)
    _log(f"Slurm is up: partition {PARTITION}, node localhost ({_node_state()})")


def _stop(pidfile: Path, comm: str) -> None:
    if _alive(pidfile, comm):
        pid = int(pidfile.read_text())
        _log(f"stopping {comm} (pid {pid})")
        os.kill(pid, 15)
        t0 = time.monotonic()
        while _alive(pidfile, comm) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        if _alive(pidfile, comm):
            os.kill(pid, 9)
    pidfile.unlink(missing_ok=True)


def down() -> None:
    if _alive(RUN / "slurmctld.pid", "slurmctld"):
        subprocess.run(["scancel", f"--partition={PARTITION}"], capture_output=True)
    _stop(RUN / "slurmd.pid", "slurmd")
    _stop(RUN / "slurmctld.pid", "slurmctld")
    _stop(RUN / "munged.pid", "munged")  # only if we started it
    _log("stopped")


def status() -> int:
    for name in ("munged", "slurmctld", "slurmd"):
        state = "running" if _alive(RUN / f"{name}.pid", name) else "not started by local_slurm"
        print(f"{name}: {state}")
    print(f"node: {_node_state() or 'unreachable'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmds = {"up": up, "down": down, "status": status}
    if len(argv) != 1 or argv[0] not in cmds:
        print(f"usage: python -m harness.launch.local_slurm {{{'|'.join(cmds)}}}", file=sys.stderr)
        return 2
    try:
        return cmds[argv[0]]() or 0
    except (SlurmSetupError, subprocess.CalledProcessError) as e:
        print(f"local_slurm: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
