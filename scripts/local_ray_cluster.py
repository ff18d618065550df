"""A Ray cluster of several nodes on this one machine, for the multi-node path without a cluster: each node its own
raylet (`ray start --head`, then `ray start --address`), on 127.0.0.1, with its own temp dir, resources and ports.
The ports are free ones picked here, never Ray's defaults, so other Ray users of the machine are untouched; `stop`
ends exactly this cluster's processes (never `ray stop`, which ends every Ray on the machine).

    python scripts/local_ray_cluster.py start --dir DIR [--nodes 2] [--cpus 8] [--gpus 1]
    python scripts/local_ray_cluster.py stop --dir DIR [--keep-logs]

`start` prints, and writes to DIR/cluster.json, the cluster's GCS address (RAY_ADDRESS for a driver), its dashboard
(RAY_ADDRESS for `ray job submit` and SUBMIT=ray) and `env`, what a driver's environment needs. The cluster always runs
with Ray's token auth, as a cluster of the recipe's should (docs/multi-node.md#a-closed-cluster): this machine's Ray
token when it has one (RAY_AUTH_MODE=token), else a token of the cluster's own, DIR/ray_auth_token (0600; the env
then names it in RAY_AUTH_TOKEN_PATH). The raylets inherit this command's environment, and their workers theirs:
export what every node's workers need first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
STATE = "cluster.json"
STOP_GRACE_S = 3  # then SIGKILL: a cluster of this machine's own, nothing in it to save


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Ports:
    """One cluster's ports, all different. Single ports are the kernel's free ones (its ephemeral range); each node's
    100 worker ports are a block below that range, where the kernel never hands a port out, so no single port of any
    node can fall inside a worker range (Ray refuses to start when one does)."""

    WORKERS = 100

    def __init__(self):
        self._taken: set[int] = set()
        self._random = random.Random()
        try:
            low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            low = 32768
        self._worker_ceiling = low  # worker blocks end below the ephemeral range

    def single(self) -> int:
        while (port := free_port()) in self._taken:
            pass
        self._taken.add(port)
        return port

    def worker_block(self) -> int:
        """The first port of WORKERS consecutive ports, each free now and none given out before."""
        floor = 10000
        for _ in range(200):
            first = self._random.randrange(floor, self._worker_ceiling - self.WORKERS)
            block = range(first, first + self.WORKERS)
            if not self._taken.intersection(block) and all(_bindable(port) for port in block):
                self._taken.update(block)
                return first
        raise RuntimeError(f"no {self.WORKERS} consecutive free ports between {floor} and {self._worker_ceiling}")


def driver_env(directory: Path | None = None) -> dict[str, str]:
    """Token auth with this machine's Ray token, or (given `directory`) a new one kept there, 0600."""
    token = Path.home() / ".ray" / "auth_token"
    if token.is_file() or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return {"RAY_AUTH_MODE": "token"}
    if directory is None:
        return {}
    own = directory / "ray_auth_token"
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(own)}


def node_ports(ports: Ports, head: bool) -> list[str]:
    """Every port a raylet opens, each different from every other port of the cluster."""
    low = ports.worker_block()
    flags = [f"--node-manager-port={ports.single()}", f"--object-manager-port={ports.single()}",
             f"--dashboard-agent-listen-port={ports.single()}", f"--dashboard-agent-grpc-port={ports.single()}",
             f"--metrics-export-port={ports.single()}", f"--runtime-env-agent-port={ports.single()}",
             f"--min-worker-port={low}", f"--max-worker-port={low + Ports.WORKERS - 1}"]
    if head:
        flags.append(f"--ray-client-server-port={ports.single()}")
    return flags


def start(directory: Path, nodes: int, cpus: int, gpus: int, auth: dict[str, str] | None = None) -> dict:
    """`auth`: Ray's authentication settings for the nodes and their drivers (RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH)
    instead of what this machine's token file implies."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # cpu_env.sh's `local` is for one node
    drivers = driver_env(directory) if auth is None else dict(auth)
    env.update(RAY_USAGE_STATS_ENABLED="0", PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}", **drivers)
    ports = Ports()
    gcs, dashboard = ports.single(), ports.single()
    temp_dirs = [tempfile.mkdtemp(prefix="rn", dir="/tmp") for _ in range(nodes)]  # short: socket paths live there
    state = {"gcs": f"127.0.0.1:{gcs}", "dashboard": f"http://127.0.0.1:{dashboard}", "temp_dirs": temp_dirs,
             "nodes": nodes, "env": drivers}
    _write(directory / STATE, state)  # before anything runs: `stop` finds what a failed start left
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", f"--num-gpus={gpus}", "--disable-usage-stats"]
    for index, temp_dir in enumerate(temp_dirs):
        if index == 0:
            command = [RAY, "start", "--head", f"--port={gcs}", "--dashboard-host=127.0.0.1",
                       f"--dashboard-port={dashboard}", "--include-dashboard=true", *node_ports(ports, head=True)]
        else:
            command = [RAY, "start", f"--address=127.0.0.1:{gcs}", *node_ports(ports, head=False)]
        proc = subprocess.run([*command, *common, f"--temp-dir={temp_dir}"], env=env, capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"node {index}: `ray start` failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    _wait_for_nodes(state, nodes)
    return state


def _wait_for_nodes(state: dict, nodes: int, timeout_s: float = 120.0) -> None:
    """Until the GCS lists `nodes` alive nodes (a raylet registers shortly after `ray start` returns)."""
    probe = (f"import json, ray; ray.init(address={state['gcs']!r}, log_to_driver=False); "
             "print(json.dumps(sum(n['Alive'] for n in ray.nodes())))")
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **state["env"]}, capture_output=True,
                              text=True, timeout=120)
        alive = int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else 0
        if alive >= nodes:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{alive} of {nodes} nodes alive after {timeout_s:.0f} s: {proc.stderr[-1500:]}")
        time.sleep(2)


def cluster_processes(temp_dirs: list[str]) -> list:
    """This cluster's processes: those whose command line names one of its temp dirs (raylets, GCS, dashboard,
    agents), and everything they started (workers, and what workers started)."""
    import psutil

    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid not in me and any(d in " ".join(proc.info["cmdline"] or []) for d in temp_dirs):
                found[proc.pid] = proc
                found.update({child.pid: child for child in proc.children(recursive=True)})
        except psutil.Error:
            continue
    return [proc for pid, proc in found.items() if pid not in me]


def stop(directory: Path, keep_logs: bool = False) -> int:
    import psutil

    state = json.loads((directory / STATE).read_text())
    procs = cluster_processes(state["temp_dirs"])
    for proc in procs:
        try:
            proc.send_signal(signal.SIGCONT)  # a stopped one would not see SIGTERM
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=STOP_GRACE_S)
    for proc in alive:  # Ray's GCS and raylets take SIGTERM as a graceful stop that can last 30 s and more
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)
    if not keep_logs:
        for temp_dir in state["temp_dirs"]:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return len(procs)


def _write(path: Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--dir", type=Path, required=True, help="where cluster.json is kept")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--cpus", type=int, default=8, help="logical CPUs per node")
    p.add_argument("--gpus", type=int, default=1, help="logical GPUs per node (on the CPU platform: ranks)")
    p.add_argument("--keep-logs", action="store_true", help="stop: keep the nodes' temp dirs (Ray's logs)")
    args = p.parse_args(argv)
    if args.action == "start":
        try:
            print(json.dumps(start(args.dir, args.nodes, args.cpus, args.gpus)))
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"error: {err}", file=sys.stderr)
            stop(args.dir, keep_logs=True)
            return 1
        return 0
    if not (args.dir / STATE).is_file():
        print(f"error: no {STATE} in {args.dir}: nothing was started there", file=sys.stderr)
        return 1
    print(f"stopped {stop(args.dir, args.keep_logs)} processes of the cluster in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
