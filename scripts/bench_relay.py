"""Benchmark: the trace relay's throughput for the run's own writes, as the launcher runs it (`python -m
recipes.trace_relay serve` under its keeper, keeping to its spool, each record fsynced before its 200).

Clients on this machine post weave's `calls/complete` batches with the run's token: each a keep-alive connection as
weave's client keeps one (the figure that matters), and, second, a new connection per write (what the relay spends
on accepting one: the kernel's word on who connects, recipes/trace_relay/peers.py). Offline (--offline): what is
measured is the relay's write path, not W&B.

    python scripts/bench_relay.py [--clients 8] [--writes 200] [--calls 10] [--runs 3]
    python scripts/bench_relay.py --recipe-root /path/to/another/checkout   # the same load on another version
    python scripts/bench_relay.py --quick        # a few writes: that it runs (CI), not a figure to record

Last line: `RESULT relay_writes_per_s=<median keep-alive> relay_write_mb_per_s=<its MB/s>
relay_connect_writes_per_s=<median, a connection per write>`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.trace_relay.names import TRACE_RELAY_TOKEN_ENV

PROJECT = "bench-entity/relay"


def batch(index: int, calls: int) -> bytes:
    """A calls/complete batch as weave sends one: `calls` calls of a trajectory's size (~2.4 KB each)."""
    text = "She sold 48 clips, then half as many, so we add the two amounts. " * 30
    return json.dumps({"batch": [{
        "project_id": PROJECT, "id": f"{index:08d}-{n:04d}", "trace_id": f"{index:08d}", "op_name": "Rollout.run",
        "started_at": "2024-01-01T00:00:00Z", "ended_at": "2024-01-01T00:00:01Z",
        "inputs": {"messages": [{"role": "assistant", "content": text}]}, "output": {"reward": 1.0},
        "attributes": {}, "summary": {}} for n in range(calls)]}, separators=(",", ":")).encode()


class Relay:
    """The supervised relay of `recipe_root`'s code on a fresh spool."""

    def __init__(self, recipe_root: Path, folder: Path) -> None:
        self.token = secrets.token_urlsafe(32)
        url_file = folder / "url"
        env = {**os.environ, TRACE_RELAY_TOKEN_ENV: self.token, "WANDB_ERROR_REPORTING": "false",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(recipe_root), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "recipes.trace_relay", "serve", "--spool", str(folder / "spool"), "--offline",
             "--entity", "bench-entity", "--url-file", str(url_file), "--min-free-mb", "64"],
            cwd=recipe_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not url_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the relay did not start")
            time.sleep(0.1)
        host, port = url_file.read_text().strip().removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def request(token: str, body: bytes, keep_alive: bool) -> bytes:
    auth = base64.b64encode(f"api:{token}".encode()).decode()
    head = (f"POST /traces/v2/{PROJECT}/calls/complete HTTP/1.1\r\nHost: relay\r\nAuthorization: Basic {auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            + ("" if keep_alive else "Connection: close\r\n") + "\r\n")
    return head.encode() + body


def answered(sock: socket.socket) -> bool:
    """Read one answer; whether it was a 200."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head.startswith(b"HTTP/1.1 200")


def load(relay: Relay, clients: int, writes: int, calls: int, keep_alive: bool) -> tuple[float, int, int]:
    """Seconds for `clients` x `writes` writes, writes answered 200, body bytes sent."""
    bodies = [[request(relay.token, batch(c * writes + i, calls), keep_alive) for i in range(writes)]
              for c in range(clients)]
    ok = [0] * clients

    def client(index: int) -> None:
        sock = socket.create_connection(relay.address) if keep_alive else None
        for data in bodies[index]:
            if not keep_alive:
                sock = socket.create_connection(relay.address)
            sock.sendall(data)
            ok[index] += answered(sock)
            if not keep_alive:
                sock.close()
        if keep_alive:
            sock.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, sum(ok), sum(len(b) for bs in bodies for b in bs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (an agent-loop worker keeps a few)")
    p.add_argument("--writes", type=int, default=200, help="writes per client and run")
    p.add_argument("--calls", type=int, default=10, help="calls per write (weave's batches)")
    p.add_argument("--runs", type=int, default=3, help="runs, each on a fresh relay and spool (the median is given)")
    p.add_argument("--recipe-root", type=Path, default=REPO_ROOT, help="the checkout whose relay runs")
    p.add_argument("--quick", action="store_true", help="--clients 2 --writes 10 --runs 1")
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.writes, args.runs = 2, 10, 1
    figures: dict[str, list[float]] = {"keep-alive": [], "mb": [], "connect": []}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-relay-") as folder:
            relay = Relay(args.recipe_root.resolve(), Path(folder))
            try:
                for keep_alive in (True, False):
                    seconds, ok, sent = load(relay, args.clients, args.writes, args.calls, keep_alive)
                    total = args.clients * args.writes
                    if ok != total:
                        raise SystemExit(f"{total - ok} of {total} writes not answered 200")
                    name = "keep-alive" if keep_alive else "connect"
                    figures[name].append(total / seconds)
                    if keep_alive:
                        figures["mb"].append(sent / seconds / 1e6)
                    print(f"run {run + 1} {name:>10}: {total} writes ({sent / 1e6:.1f} MB) in {seconds:.2f} s: "
                          f"{total / seconds:.0f} writes/s", flush=True)
            finally:
                relay.stop()
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"relay of {args.recipe_root}: {args.clients} clients x {args.writes} writes of {args.calls} calls, "
          f"{args.runs} run(s), median")
    print(f"RESULT relay_writes_per_s={median['keep-alive']:.1f} relay_write_mb_per_s={median['mb']:.2f} "
          f"relay_connect_writes_per_s={median['connect']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
