"""The Ray nodes of a batch script that starts them itself (scripts/run_gsm8k_grpo.sbatch), before the launcher joins:

    python -m recipes.launch.ray_nodes address [--interface IF | --ip ADDRESS]   # the head's address, printed
    python -m recipes.launch.ray_nodes wait ADDRESS N      # until N nodes are alive at ADDRESS (exit 0); bound it with
                                                           # `timeout`: it polls every 2 s
    python -m recipes.launch.ray_nodes hold -- ray start --block ...   # a node's Ray, kept through a SIGTERM
    python -m recipes.launch.ray_nodes watch --tell PID    # a step that passes a preemption's SIGTERM on to PID

`address`: the head's IPv4 address that the other nodes reach: --ip's (refused unless this node has it), else
--interface's, else the first non-loopback address of this node (what `hostname -I` lists first: on a multi-NIC node
that may be a docker bridge or InfiniBand, hence the knobs); one line on stderr says which and what else there was.

`wait`: verl checks the cluster's GPUs once, when main_ppo starts, so every node must have joined first; and a worker's
`ray start` gives up after Ray's ~20 tries 1 s apart, so workers start only once the head answers.

`hold`: runs the command with SIGTERM blocked, for it and every process it starts (the mask is inherited: Ray's GCS,
raylet, agents and workers), and stays in front of it. A preemption with a grace time sends SIGTERM to every process of
every job step but the batch script's: Ray goes on until the launcher has saved the step. `hold` says so in one
line. SIGUSR2 (the batch script's, through SLURM for a step) stops the node: the command and what it started are
killed, exit 0. The command's own end is `hold`'s. (A program that unblocks SIGTERM itself, as Go's runtime does, still
dies of it: the batch script keeps the head's Ray in its own step, which the preemption spares.)

`watch`: a job step of its own that waits for a preemption's SIGTERM and passes the first one to --tell (the batch
script, on the same node), which asks the launcher to save; SIGUSR2 ends it, exit 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

POLL_S = 2.0
STOP_SIGNAL = signal.SIGUSR2  # the batch script's `stop this node`, which SLURM passes to every process of a step


def alive_nodes(address: str) -> int:
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        return sum(1 for node in ray.nodes() if node.get("Alive"))
    finally:
        ray.shutdown()


def wait(address: str, wanted: int) -> int:
    while True:
        try:
            alive = alive_nodes(address)
        except Exception as err:  # the head is not up yet: Ray raises ConnectionError and others
            alive, why = 0, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        else:
            why = ""
        if alive >= wanted:
            print(f"[ray_nodes] {alive} of {wanted} Ray node(s) alive at {address}", file=sys.stderr, flush=True)
            return 0
        print(f"[ray_nodes] {alive} of {wanted} Ray node(s) alive at {address} {why}".rstrip(), file=sys.stderr,
              flush=True)
        time.sleep(POLL_S)


def ipv4_addresses() -> dict[str, list[str]]:
    """This node's IPv4 addresses by interface, in the kernel's order of interfaces (what `hostname -I` lists)."""
    import psutil  # Ray's own dependency

    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in psutil.net_if_addrs().items()
            if any(a.family == socket.AF_INET for a in addrs)}


class AddressError(ValueError):
    """No usable head address; the message is the one line the user sees."""


def head_address(interface: str = "", ip: str = "", found: dict[str, list[str]] | None = None) -> tuple[str, str]:
    """(the address, where it came from)."""
    found = ipv4_addresses() if found is None else found
    listed = "; ".join(f"{name} {' '.join(addrs)}" for name, addrs in found.items()) or "none"
    if ip:
        if not any(ip in addrs for addrs in found.values()):
            raise AddressError(f"RAY_HEAD_IP={ip} is not an address of this node ({listed})")
        return ip, "RAY_HEAD_IP"
    if interface:
        addrs = found.get(interface)
        if not addrs:
            raise AddressError(f"RAY_HEAD_INTERFACE={interface}: no IPv4 address on it ({listed})")
        return addrs[0], f"RAY_HEAD_INTERFACE={interface}"
    first = [(name, a) for name, addrs in found.items() for a in addrs if not a.startswith("127.")]
    if not first:
        raise AddressError(f"this node has no IPv4 address but loopback ({listed}): set RAY_HEAD_IP")
    name, address = first[0]
    others = ", ".join(f"{a} ({n})" for n, a in first[1:])
    return address, (f"the first address of this node, on {name}" +
                     (f"; also {others}: RAY_HEAD_INTERFACE or RAY_HEAD_IP choose another" if others else ""))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _on_stop() -> list[bool]:
    """A flag set by STOP_SIGNAL."""
    stopping = [False]
    signal.signal(STOP_SIGNAL, lambda _signum, _frame: stopping.__setitem__(0, True))
    return stopping


def hold(command: list[str], node: str) -> int:
    def say(text: str) -> None:
        print(f"[ray node {node}] {text}", flush=True)

    signal.signal(signal.SIGTERM, lambda _signum, _frame: say(
        "SIGTERM (a preemption's grace time, or scancel): Ray goes on until the batch script stops it"))
    stopping = _on_stop()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        child = subprocess.Popen(command)  # inherits the blocked SIGTERM; so does all it starts
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    while True:
        try:
            status = child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if not stopping[0]:
                continue
            say("stopped by the batch script")
            for pid in [*_descendants(child.pid), child.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            child.wait()
            return 0
        return 0 if stopping[0] else status


def watch(tell: int, node: str) -> int:
    told = [False]

    def on_term(_signum, _frame) -> None:
        if told[0]:
            print(f"[stop watch {node}] SIGTERM again: the batch script has it already", flush=True)
            return
        told[0] = True
        print(f"[stop watch {node}] SIGTERM (a preemption's grace time, or scancel): passed to the batch script",
              flush=True)
        try:
            os.kill(tell, signal.SIGTERM)
        except ProcessLookupError:
            print(f"[stop watch {node}] the batch script (pid {tell}) is gone", flush=True)

    signal.signal(signal.SIGTERM, on_term)
    stopping = _on_stop()
    while not stopping[0]:
        time.sleep(0.5)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m recipes.launch.ray_nodes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    a = sub.add_parser("address", help="the head's address")
    a.add_argument("--interface", default="")
    a.add_argument("--ip", default="")
    w = sub.add_parser("wait", help="until N nodes are alive")
    w.add_argument("address")
    w.add_argument("nodes", type=int)
    h = sub.add_parser("hold", help="a node's Ray kept through a SIGTERM")
    h.add_argument("command", nargs=argparse.REMAINDER)
    t = sub.add_parser("watch", help="a preemption's SIGTERM passed on")
    t.add_argument("--tell", type=int, required=True, help="the batch script's pid, on this node")
    args = p.parse_args(argv)
    if args.action == "address":
        try:
            address, why = head_address(args.interface, args.ip)
        except AddressError as err:
            print(f"[ray_nodes] error: {err}", file=sys.stderr)
            return 2
        print(f"[ray_nodes] the Ray head's address: {address} ({why})", file=sys.stderr)
        print(address)
        return 0
    if args.action == "wait":
        return wait(args.address, args.nodes)
    if args.action == "watch":
        return watch(args.tell, socket.gethostname())
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("hold: the command to run, after --")
    return hold(command, socket.gethostname())


if __name__ == "__main__":
    sys.exit(main())
