"""Break trace relays from outside, as an operator (or a check) would: find each node's relay by its command line,
SIGKILL one node's, SIGSTOP another's for a while, and see each replaced on its node.

    python scripts/relay_faults.py list [--spool-base DIR]
    python scripts/relay_faults.py inject [--spool-base DIR] [--kill 1] [--stop 1] [--stop-seconds 30]
                                          [--when-exists FILE] [--timeout 900]

A relay process is one whose command line holds `recipes.trace_relay serve` and `--listen-fd` (the relay, not a
keeper: a keeper's process is the launcher, `ray::NodeRelayKeeper`, or a `serve` without --listen-fd). Its node is
the folder its spool is in (`--spool <base>/<node>`). `inject` waits for FILE (e.g. OUTPUT_DIR/rollouts/1.jsonl:
training has started) and for a relay on as many nodes as it breaks, SIGKILLs the relays of `--kill` nodes and
SIGSTOPs those of `--stop` other nodes for `--stop-seconds` (then SIGCONT, if the process is still there), and
prints, as one JSON line, what it did and how long each node went without an answering relay (until a relay with
another pid served it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

RELAY_MARKS = ("recipes.trace_relay", "serve", "--listen-fd")


def relays(spool_base: str | None = None) -> dict[str, int]:
    """node -> pid of the relay serving it now."""
    import psutil

    found = {}
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if not all(mark in cmdline for mark in RELAY_MARKS) or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        spool = cmdline[cmdline.index("--spool") + 1] if "--spool" in cmdline else ""
        if spool_base and not spool.startswith(spool_base.rstrip("/") + "/"):
            continue
        found[Path(spool).name] = proc.pid
    return found


def _wait(predicate, timeout_s: float, poll_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    return None


def inject(spool_base: str | None, kill: int, stop: int, stop_s: float, when_exists: str | None,
           timeout_s: float) -> dict:
    if when_exists and not _wait(lambda: Path(when_exists).exists(), timeout_s, 1.0):
        raise TimeoutError(f"{when_exists} did not appear within {timeout_s:.0f} s")
    found = _wait(lambda: (lambda r: r if len(r) >= kill + stop else None)(relays(spool_base)), timeout_s)
    if not found:
        raise TimeoutError(f"no relay on {kill + stop} nodes within {timeout_s:.0f} s: {relays(spool_base)}")
    nodes = sorted(found)
    plan = [(node, signal.SIGKILL) for node in nodes[:kill]] + [(node, signal.SIGSTOP) for node in
                                                                  nodes[kill:kill + stop]]
    started = time.monotonic()
    for node, sig in plan:
        os.kill(found[node], sig)
    events = {node: {"pid": found[node], "signal": signal.Signals(sig).name} for node, sig in plan}
    resumed = False
    while time.monotonic() - started < max(stop_s, 1) + timeout_s:
        now = relays(spool_base)
        for node, event in events.items():
            if "replaced_after_s" not in event and now.get(node) not in (None, event["pid"]):
                event["replaced_after_s"] = round(time.monotonic() - started, 1)
                event["new_pid"] = now[node]
        if not resumed and time.monotonic() - started >= stop_s:
            for event in events.values():  # a stopped relay its keeper did not end goes on
                if event["signal"] == "SIGSTOP":
                    try:
                        os.kill(event["pid"], signal.SIGCONT)
                        event["still_there_after_stop"] = True
                    except ProcessLookupError:
                        event["still_there_after_stop"] = False
            resumed = True
        if resumed and all("replaced_after_s" in event for event in events.values()):
            break
        time.sleep(0.5)
    return {"nodes": nodes, "stop_seconds": stop_s, "faults": events}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("list", "inject"))
    p.add_argument("--spool-base", help="only relays whose spool is under this folder (one run's)")
    p.add_argument("--kill", type=int, default=1, help="nodes whose relay gets SIGKILL")
    p.add_argument("--stop", type=int, default=1, help="other nodes whose relay gets SIGSTOP")
    p.add_argument("--stop-seconds", type=float, default=30.0, help="how long a stopped relay stays stopped")
    p.add_argument("--when-exists", help="wait for this file before breaking anything")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the file, the relays")
    args = p.parse_args(argv)
    if args.action == "list":
        for node, pid in sorted(relays(args.spool_base).items()):
            print(json.dumps({"node": node, "pid": pid}))
        return 0
    try:
        print(json.dumps(inject(args.spool_base, args.kill, args.stop, args.stop_seconds, args.when_exists,
                                args.timeout)), flush=True)
    except TimeoutError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
