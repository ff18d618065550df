"""Stands in for a machine with no network: put this folder first on PYTHONPATH and set NO_NETWORK_LOG=<file>,
and every Python process started with that environment (the launcher's preflight, its subprocesses) refuses any
attempt to resolve or connect to a host other than this machine's loopback, and writes one line per attempt to
the file: the process, the host and the stack that asked. Nothing leaves the machine; a test reads the file.

Python's audit hooks see every socket.getaddrinfo and socket.connect of the interpreter, whatever library (urllib3,
sentry_sdk, httpx, ...) makes them; a name is refused before it is resolved, so not even a DNS query goes out."""

import os
import sys
import traceback

_LOG = os.environ.get("NO_NETWORK_LOG")
_LOOPBACK_NAMES = {"localhost", "::1", "", "0.0.0.0"}


def _is_loopback(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    return host is None or str(host) in _LOOPBACK_NAMES or str(host).startswith("127.")


def _refuse_outbound(event: str, args: tuple) -> None:
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect" and isinstance(args[1], tuple):  # AF_INET/AF_INET6; AF_UNIX paths are local
        host = args[1][0]
    else:
        return
    if _is_loopback(host):
        return
    stack = "".join(traceback.format_stack(limit=8)[:-1]).replace("\n", " | ")
    with open(_LOG, "a") as log:
        log.write(f"pid {os.getpid()} ({' '.join(sys.argv[:2])}): {event} {host} -- {stack}\n")
    raise OSError(f"no network here (tests/testkit/no_network): {event} {host}")


if _LOG:
    sys.addaudithook(_refuse_outbound)
