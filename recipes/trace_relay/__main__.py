"""Command line of the node-local trace relay.

    GSM8K_RECIPE_TRACE_RELAY_TOKEN=<secret> \
    python -m recipes.trace_relay serve --spool DIR [--port 0] [--host 127.0.0.1] [--upstream URL | --offline]
                                        [--entity E] [--url-file FILE] [--drain-timeout S] [--max-retry-interval S]
    python -m recipes.trace_relay status --spool DIR
    python -m recipes.trace_relay upload --spool DIR [--upstream URL] [--timeout S]   (= gsm8k-upload-traces)

serve: answers only clients that present the token in GSM8K_RECIPE_TRACE_RELAY_TOKEN (weave sends it as its API key;
the launcher makes one per launch and hands it to the relays and the workers, never on a command line), for the
requests weave's client makes (recipes/trace_relay/access.py), within recipes/trace_relay/limits.py; on 127.0.0.1
unless told otherwise (--host, --allow-remote). It prints (and writes to --url-file) the URL to export as
GSM8K_RECIPE_TRACE_RELAY, runs until SIGTERM or SIGINT, then sends what is pending for up to --drain-timeout and
prints how many records were sent and are pending. Exit status 0 when nothing is left, 3 when records stay in the
spool for a later upload. A relay that dies, or answers no health check for --hang-after seconds, is replaced on the
same address, which stays open meanwhile (recipes/trace_relay/keeper.py).
upload: sends a spool (e.g. copied from an air-gapped cluster) to W&B; running it again sends nothing twice.
Exit status 0 when everything is sent, 1 otherwise. W&B is WANDB_BASE_URL (default https://api.wandb.ai), with
WANDB_API_KEY or the netrc entry for that host.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from recipes.trace_relay import limits
from recipes.trace_relay.keeper import HANG_AFTER_S, NOT_STARTED_EXIT
from recipes.trace_relay.names import TRACE_RELAY_TOKEN_ENV
from recipes.trace_relay.spool import UPLOAD_COMMAND

PENDING_EXIT = 3


def main(argv: list[str] | None = None, upload_help: dict | None = None) -> int:
    """upload_help: prog and description of the upload command's --help (gsm8k-upload-traces gives its own)."""
    parser = argparse.ArgumentParser(prog="python -m recipes.trace_relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the relay")
    serve.add_argument("--spool", required=True, type=Path)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this node's processes only). Any other address "
                            "(this node's IP, 0.0.0.0) serves other nodes too, in plain HTTP: the token and the traces "
                            "cross the network readable by anyone on its path, and whoever holds the token writes "
                            "traces to W&B, and makes weave's reads there, with this relay's W&B key. Needs "
                            "--allow-remote; firewall the port to the run's nodes")
    serve.add_argument("--allow-remote", action="store_true",
                       help="serve a --host other than loopback (see --host for what that exposes)")
    serve.add_argument("--max-body-mb", type=float, default=limits.MAX_BODY_BYTES / 2 ** 20,
                       help="larger request bodies are refused (413) before they are read (MiB)")
    serve.add_argument("--max-connections", type=int, default=limits.MAX_CONNECTIONS,
                       help="connections served at once; one more is answered 503")
    serve.add_argument("--client-timeout", type=float, default=limits.CLIENT_TIMEOUT_S,
                       help="a client silent this long, or that takes longer to send one request, is cut off (s)")
    serve.add_argument("--min-free-mb", type=float, default=limits.MIN_FREE_BYTES / 2 ** 20,
                       help="free space the spool's disk keeps: below it new records are refused (503, the client "
                            "retries) (MiB)")
    serve.add_argument("--port", type=int, default=0, help="0: any free port (see --url-file)")
    serve.add_argument("--offline", action="store_true", help="keep everything on disk, send nothing")
    serve.add_argument("--entity", default=os.environ.get("WANDB_ENTITY") or None,
                       help="W&B entity for weave.init while W&B is unreachable (default: WANDB_ENTITY)")
    serve.add_argument("--url-file", type=Path, help="write the relay's URL here once it listens")
    serve.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to keep sending at stop")
    serve.add_argument("--max-retry-interval", type=float, default=30.0,
                       help="longest wait between attempts while W&B is unreachable (seconds)")
    serve.add_argument("--max-restarts", type=int, default=5,
                       help="restarts of a relay that keeps dying (each within a minute) before giving up")
    serve.add_argument("--restart-delay", type=float, default=1.0,
                       help="seconds before the first restart of a relay that died; doubled on each death in a row")
    serve.add_argument("--hang-after", type=float, default=HANG_AFTER_S,
                       help="a relay that answers no health check for this many seconds (stopped, deadlocked) is "
                            "killed and replaced")
    serve.add_argument("--lock-wait", type=float, default=30.0,
                       help="seconds to wait for a spool still held by a relay that is exiting")
    serve.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)  # the socket the supervisor holds
    status = commands.add_parser("status", help="count sent and pending records (no network)")
    status.add_argument("--spool", required=True, type=Path)
    upload = commands.add_parser("upload", help="send a spool's pending records to W&B",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 **(upload_help or {"description": "Send a spool's pending records to W&B."}))
    for sub in (serve, upload):
        sub.add_argument("--upstream", help="W&B base URL (default: WANDB_BASE_URL or https://api.wandb.ai)")
        sub.add_argument("--upstream-trace", help="W&B trace server URL (default: derived from --upstream)")
    upload.add_argument("--spool", required=True, type=Path, help="the relay's spool dir (OUTPUT_DIR/trace_spool)")
    upload.add_argument("--timeout", type=float, default=600.0, help="give up retrying after this many seconds")
    args = parser.parse_args(argv)
    # weave (imported for its digest code) would report errors to Sentry: nothing leaves the node from here
    os.environ["WANDB_ERROR_REPORTING"] = "false"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded request otherwise
    if args.command == "serve":
        # a relay started by a Ray node kept through a preemption (recipes/launch/ray_nodes.py `hold`) inherits a
        # blocked SIGTERM: its stop would wait in the kernel, and the run's end the keeper's whole drain timeout
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})
        refusal = _open_to_anyone(args)
        if refusal:
            print(f"error: trace relay not started: {refusal}", file=sys.stderr)
            return NOT_STARTED_EXIT
    if args.command == "serve" and args.listen_fd is None:
        from recipes.trace_relay.keeper import supervise

        argv = sys.argv[1:] if argv is None else argv
        return supervise(argv[1:], args.host, args.port, args.max_restarts, args.restart_delay, args.hang_after)
    return {"serve": _serve, "status": _status, "upload": upload_spool}[args.command](args)


def _open_to_anyone(args) -> str | None:
    """Why this relay would serve clients it cannot tell apart, or None."""
    if not os.environ.get(TRACE_RELAY_TOKEN_ENV):
        return (f"no token: set {TRACE_RELAY_TOKEN_ENV} to a secret its clients present (the launcher makes one per "
                f"launch; by hand: `export {TRACE_RELAY_TOKEN_ENV}=$(python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')` for the relay and its clients)")
    try:
        loopback = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not args.allow_remote:
        return (f"--host {args.host} serves other machines, in plain HTTP (see --help for what that exposes): "
                "add --allow-remote to mean it, or keep the default 127.0.0.1")
    return None


def _serve(args) -> int:
    """One relay on the socket its supervisor holds (--listen-fd), or on host:port when run on its own."""
    import socket

    from recipes.signals import wait_for_event
    from recipes.trace_relay.keeper import exit_with_parent
    from recipes.trace_relay.relay import TraceRelay
    from recipes.trace_relay.spool import SpoolBusy
    from recipes.trace_relay.upstream import Upstream, UpstreamRefused

    if args.offline and not args.entity:
        print("error: --offline needs the W&B entity the traces will be uploaded to: --entity E or WANDB_ENTITY=E",
              file=sys.stderr)
        return NOT_STARTED_EXIT
    stop = threading.Event()  # handlers first: a SIGTERM as soon as the URL is out still drains
    orphaned = threading.Event()  # SIGHUP: its keeper died; exit at once, the next keeper's relay sends the spool
    for sig in (signal.SIGTERM, signal.SIGINT):
        # started in the background by the launcher, SIGINT is ignored: a Ctrl-C meant for training must not stop
        # the relay before the workers' last flush; the launcher sends SIGTERM once main_ppo has exited
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: (orphaned.set(), stop.set()))
    listening = None
    if args.listen_fd is not None:
        exit_with_parent()
        listening = socket.socket(fileno=args.listen_fd)
    try:
        upstream = None if args.offline else Upstream.from_env(args.upstream, args.upstream_trace)
        relay = TraceRelay(args.spool, upstream, token=os.environ[TRACE_RELAY_TOKEN_ENV], entity=args.entity,
                           host=args.host, port=args.port, max_retry_interval_s=args.max_retry_interval,
                           listening=listening, lock_wait_s=args.lock_wait,
                           limits=limits.Limits(int(args.max_body_mb * 2 ** 20), args.client_timeout,
                                                args.max_connections),
                           min_free_bytes=int(args.min_free_mb * 2 ** 20)).start()
    except (UpstreamRefused, SpoolBusy, OSError) as err:
        print(f"error: trace relay not started: {err}", file=sys.stderr)
        return NOT_STARTED_EXIT
    if args.url_file:  # the URL only: the token never goes into a file
        from recipes.private_files import Folder

        with Folder.open(args.url_file.parent) as folder:
            folder.write(args.url_file.name, relay.url + "\n")
    target = "offline: kept on disk only" if upstream is None else f"forwarding to {upstream.base_url}"
    print(f"trace relay: {relay.url} (spool {args.spool}, {target})", flush=True)

    wait_for_event(stop)  # a SIGTERM caught by a request's thread still stops it
    drain_s = 0.0 if orphaned.is_set() else args.drain_timeout
    print(f"trace relay: stopping, sending pending records for up to {drain_s:.0f} s", flush=True)
    summary = relay.stop(drain_s)
    print(f"trace relay stopped: {summary.line(args.spool)}", flush=True)
    return PENDING_EXIT if summary.pending else 0


def _status(args) -> int:
    from recipes.trace_relay.spool import Spool

    try:
        spool = Spool(args.spool)
    except OSError as err:  # e.g. a spool in a folder others can write
        print(f"error: {err}", file=sys.stderr)
        return 1
    rejected = args.spool / "rejected.spool"
    print(f"{args.spool}: {spool.sent_count} records sent ({spool.sent_bytes} bytes), {spool.pending_count} pending"
          + (f", rejected records in {rejected}" if rejected.exists() else ""))
    return 0


def upload_spool(args) -> int:
    from recipes.trace_relay.spool import Spool, SpoolBusy
    from recipes.trace_relay.upstream import Forwarder, Upstream, UpstreamRefused

    if not (args.spool / "segments").is_dir():
        print(f"error: {args.spool} is not a trace spool (no segments/ inside)", file=sys.stderr)
        return 1
    try:
        upstream = Upstream.from_env(args.upstream, args.upstream_trace)
        spool = Spool(args.spool).acquire()
    except (UpstreamRefused, SpoolBusy, OSError) as err:  # OSError: e.g. a spool of another user's
        print(f"error: {err}", file=sys.stderr)
        return 1
    before = spool.sent_count
    forwarder = Forwarder(spool, upstream)
    error = forwarder.drain(time.monotonic() + args.timeout)
    sent, pending = spool.sent_count - before - forwarder.rejected_total, spool.pending_count
    spool.close()
    print(f"uploaded {sent} trace records to {upstream.base_url}; {pending} pending"
          + (f", {forwarder.rejected_total} rejected (kept in {args.spool / 'rejected.spool'})"
             if forwarder.rejected_total else "")
          + (f" (last error: {error}); run this again to resume" if pending else ""))
    return 1 if pending or forwarder.rejected_total else 0


UPLOAD_DESCRIPTION = """Send Weave traces kept by the trace relay to W&B (after an outage, or from an air-gapped
cluster).

    gsm8k-upload-traces --spool outputs/<experiment>/trace_spool [--upstream https://api.wandb.ai]

Copy the spool directory to a machine that reaches W&B and run this there, with WANDB_API_KEY set (or `wandb
login`). It sends the records in the order they were made, creates the project if needed, resumes where it
stopped, and never sends a record twice once W&B confirmed it. Prints what was sent and what is left; exit
status 0 only when nothing is left.
"""


def upload_main() -> int:
    """UPLOAD_COMMAND (pyproject.toml's [project.scripts]): the upload command on its own, with its own --help."""
    return main(["upload", *sys.argv[1:]], upload_help={"prog": UPLOAD_COMMAND, "description": UPLOAD_DESCRIPTION})


if __name__ == "__main__":
    sys.exit(main())
