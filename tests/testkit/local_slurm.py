"""A SLURM on this machine, for the batch script's path without a cluster: Debian's slurm-wlm,
`AuthType=auth/none` (no munge daemon, nothing leaves the machine), its own config, state, spool, logs and free ports
under one folder, so a SLURM the machine already runs is untouched. `stop` ends exactly the daemons it started.

- one node (the default): slurmctld and one slurmd on 127.0.0.1;
- `nodes=2` (or more; root): slurmctld and each slurmd in its own network, UTS and mount namespace
  (testkit/namespaced_nodes.py): node0, node1, ... with their own addresses on a bridge, hostnames, /tmp/ray and
  local folder, reached from here through the bridge, which `state["host_address"]` names (serve what the jobs must
  reach there); `second_nic` gives node0 a first interface that reaches nothing, as a multi-NIC head.

Both have two partitions over all nodes: `debug` (the default; a job in it is preempted with GRACE_S of grace time and
requeued) and `urgent` (higher priority: a job there preempts one in `debug`), PreemptParameters left at SLURM's
default, so a preemption sends SIGTERM to every step but the batch step, as on a cluster that does not set
`send_user_signal`.

    PYTHONPATH=tests python -m testkit.local_slurm start --dir DIR [--nodes 2]    # prints its state (JSON)
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
URGENT = "urgent"  # the partition whose jobs preempt PARTITION's
GRACE_S = 600  # a preempted job's grace time: SIGTERM to its steps, then this long before it is killed and requeued
PACKAGE = "slurm-wlm"
CONTROLLER = "ctl"


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


def config(folder: Path, cpus: int, ctld_port: int, slurmd_port: int, controller: tuple[str, str] | None = None,
           nodes: list[tuple[str, str, str]] | None = None, grace_s: int = GRACE_S, local: Path | None = None) -> str:
    """slurm.conf: `nodes` (name, address, hostname) of `cpus` CPUs each, one node on 127.0.0.1 by default; the
    controller `(hostname, address)`, localhost by default. Jobs may be requeued (JobRequeue), steps may share CPUs;
    a job of URGENT preempts one of PARTITION, which gets `grace_s` of grace time and is requeued. Each node's files
    live in its own folder: `local`, where each namespaced node mounts its own (one node: <folder>/local)."""
    nodes = nodes or [(NODE, "127.0.0.1", socket.gethostname())]
    host, address = controller or ("localhost", "127.0.0.1")
    local = local or folder / "local"
    names = ",".join(name for name, _, _ in nodes)
    return "\n".join([
        "ClusterName=recipe",
        f"SlurmctldHost={host}({address})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={local}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={local}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={local}/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
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
        *(f"NodeName={name} NodeAddr={addr} NodeHostname={hostname} CPUs={cpus} State=UNKNOWN"
          for name, addr, hostname in nodes),
        f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES "
        f"PriorityTier=1 PreemptMode=REQUEUE GraceTime={grace_s}",
        f"PartitionName={URGENT} Nodes={names} MaxTime=INFINITE State=UP OverSubscribe=YES PriorityTier=2 "
        "PreemptMode=OFF",
        "",
    ])


def _daemon(folder: Path, name: str, command: list[str], env: dict, nodes: dict | None, where: str) -> int:
    with open(folder / f"{name}.out", "ab") as out:
        if nodes is None:
            return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True).pid
        from testkit import namespaced_nodes

        return namespaced_nodes.start_in(nodes, where, command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL).pid


def start(folder: Path, cpus: int | None = None, timeout_s: float = 60, nodes: int = 1,
          second_nic: bool = False, grace_s: int = GRACE_S) -> dict:
    """SLURM with `nodes` nodes (more than one: namespaced, root only; testkit/namespaced_nodes.py raises
    NamespacesUnavailable where they cannot be made). Its state: conf, env (SLURM_CONF), node names, partitions, and
    for namespaced nodes `host_address` (this machine on their bridge) and `nodes` (each one's netns and address)."""
    ensure_installed()
    folder = Path(folder).resolve()
    for sub in ("state", "local/spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    cpus = cpus or os.cpu_count() or 1
    conf = folder / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    state: dict = {"conf": str(conf), "pids": {}, "env": {"SLURM_CONF": str(conf)}, "node": NODE,
                   "partition": PARTITION, "urgent": URGENT, "grace_s": grace_s}
    made = None
    if nodes > 1:
        from testkit import namespaced_nodes

        names = [f"node{i}" for i in range(nodes)]
        made = namespaced_nodes.make(folder / "net", [CONTROLLER, *names], second_nic="node0" if second_nic else None)
        for node in made["nodes"].values():
            Path(node["dir"], "local", "spool").mkdir(parents=True, exist_ok=True)
        conf.write_text(config(folder, cpus, _free_port(), _free_port(),
                               (CONTROLLER, made["nodes"][CONTROLLER]["address"]),
                               [(name, made["nodes"][name]["address"], name) for name in names], grace_s,
                               Path(made["local"])))
        state.update(names=names, net=made, host_address=made["host_address"])
        daemons = [("slurmctld", CONTROLLER), *((f"slurmd-{name}", name) for name in names)]
    else:
        conf.write_text(config(folder, cpus, _free_port(), _free_port(), grace_s=grace_s))
        state.update(names=[NODE])
        daemons = [("slurmctld", None), (f"slurmd-{NODE}", NODE)]
    (folder / STATE).write_text(json.dumps(state))
    try:
        for name, where in daemons:
            command = (["slurmctld", "-D", "-i", "-f", str(conf)] if name == "slurmctld"
                       else ["slurmd", "-D", "-N", where, "-f", str(conf)])
            state["pids"][name] = _daemon(folder, name, command, env, made, where)
            (folder / STATE).write_text(json.dumps(state))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            shown = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%t"], env=env, capture_output=True,
                                   text=True)
            states = shown.stdout.split()
            if shown.returncode == 0 and len(states) == nodes and set(states) <= {"idle", "mix", "alloc"}:
                return state
            time.sleep(0.5)
        raise RuntimeError(f"the local SLURM's nodes did not come up in {timeout_s:.0f} s; logs in {folder}")
    except BaseException:
        stop(folder)
        raise


def stop(folder: Path) -> None:
    """Every job cancelled, the daemons stopped (SIGTERM, then SIGKILL), and for namespaced nodes everything left in
    their namespaces, the namespaces and their links removed."""
    path = Path(folder) / STATE
    if not path.is_file():
        return
    state = json.loads(path.read_text())
    env = {**os.environ, "SLURM_CONF": state["conf"]}
    if state["pids"]:
        subprocess.run(["scancel", "--full", "--partition", state["partition"]], env=env, capture_output=True,
                       timeout=30)
        subprocess.run(["scancel", "--full", "--partition", state["urgent"]], env=env, capture_output=True,
                       timeout=30)
    import psutil

    daemons = []
    for pid in state["pids"].values():
        try:
            daemons.append(psutil.Process(pid))
            os.killpg(pid, signal.SIGTERM)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    # psutil reaps the ones that are this process's children: a zombie would answer kill(pid, 0) until then
    _, alive = psutil.wait_procs(daemons, timeout=10)
    for proc in alive:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if state.get("net"):
        from testkit import namespaced_nodes

        namespaced_nodes.remove(state["net"])
    path.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--cpus", type=int, default=None, help="each node's CPUs (default: this machine's)")
    p.add_argument("--nodes", type=int, default=1, help="more than one: namespaced nodes (root)")
    p.add_argument("--second-nic", action="store_true", help="node0's first interface reaches nothing")
    args = p.parse_args(argv)
    if args.action == "start":
        print(json.dumps(start(args.dir, args.cpus, nodes=args.nodes, second_nic=args.second_nic)))
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
