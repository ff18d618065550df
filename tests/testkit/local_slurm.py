"""A one-node SLURM on this machine (slurmctld and slurmd on 127.0.0.1), for the batch script's path without a
cluster: Debian's slurm-wlm, `AuthType=auth/none` (no munge daemon, nothing leaves the machine), its own config,
state, spool, logs and free ports under one folder, so a SLURM the machine already runs is untouched. `stop` ends
exactly the daemons it started.

    PYTHONPATH=tests python -m testkit.local_slurm start --dir DIR    # prints {"conf": ..., "env": {"SLURM_CONF": ...}}
    PYTHONPATH=tests python -m testkit.local_slurm stop --dir DIR

The commands (sbatch, squeue, scontrol, scancel, sacct-less `scontrol show job`) find this SLURM through
SLURM_CONF in their environment (`env` of the state). `ensure_installed()` installs slurm-wlm with apt-get when
`slurmctld` is missing (root only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = "slurm.json"
NODE = "node0"
PARTITION = "debug"
PACKAGE = "slurm-wlm"


def ensure_installed() -> None:
    if shutil.which("slurmctld") and shutil.which("sbatch"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError(f"SLURM is not installed and cannot be installed here: apt-get install {PACKAGE} as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(folder: Path, cpus: int, ctld_port: int, slurmd_port: int) -> str:
    """slurm.conf for one node of `cpus` CPUs; jobs may be requeued (JobRequeue), steps may share CPUs."""
    return "\n".join([
        "ClusterName=recipe",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "JobRequeue=1",
        "KillWait=30",
        "MinJobAge=600",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={cpus} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
        "",
    ])


def start(folder: Path, cpus: int | None = None, timeout_s: float = 60) -> dict:
    ensure_installed()
    folder = Path(folder).resolve()
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text(config(folder, cpus or os.cpu_count() or 1, _free_port(), _free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pids = {}
    for name, command in (("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)]),
                          ("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(conf)])):
        with open(folder / f"{name}.out", "ab") as out:
            pids[name] = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True).pid
    state = {"conf": str(conf), "pids": pids, "env": {"SLURM_CONF": str(conf)}, "node": NODE,
             "partition": PARTITION}
    (folder / STATE).write_text(json.dumps(state))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True)
        if shown.returncode == 0 and shown.stdout.strip() in ("idle", "mix", "alloc"):
            return state
        time.sleep(0.5)
    stop(folder)
    raise RuntimeError(f"the local SLURM's node did not come up in {timeout_s:.0f} s; logs in {folder}")


def stop(folder: Path) -> None:
    path = Path(folder) / STATE
    if not path.is_file():
        return
    state = json.loads(path.read_text())
    env = {**os.environ, "SLURM_CONF": state["conf"]}
    subprocess.run(["scancel", "--full", "--partition", state["partition"]], env=env, capture_output=True)
    for pid in state["pids"].values():
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    for pid in state["pids"].values():
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    path.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--cpus", type=int, default=None, help="the node's CPUs (default: this machine's)")
    args = p.parse_args(argv)
    if args.action == "start":
        print(json.dumps(start(args.dir, args.cpus)))
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
