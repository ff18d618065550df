"""Nodes on this machine, each a network namespace with its own address on one bridge and, for what runs in it, its own
hostname (a UTS namespace) and its own /etc/hosts, /tmp/ray and local folder (a mount namespace): what a cluster's
nodes are to SLURM and Ray, with nothing leaving the machine. The bridge's address on this machine is where the nodes
reach it (a W&B stand-in, a controller's commands); the namespaces have no route anywhere else.

    state = make(folder, ["ctl", "node0", "node1"], second_nic="node0")   # root only
    process = start_in(state, "node0", ["slurmd", "-D", ...])
    remove(state)   # every process in the namespaces, the namespaces, the links

Names start with PREFIX and carry the making process's pid: `make` first removes what a process that no longer runs
left behind (a test killed before its cleanup), never another live process's. `second_nic` gives that node another
interface whose address comes first in `hostname -I` and reaches nothing: a multi-NIC head (InfiniBand, a docker
bridge) where the first address is the wrong one.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "rsl"  # a link's name has at most 15 characters: rsl + the pid in hex + one letter + a suffix
STATE = "nodes.json"
RAY_TMP = Path("/tmp/ray")  # Ray's default temp dir: each node gets its own, as on separate machines
_made = itertools.count()
_NAME = re.compile(rf"^{PREFIX}-([0-9a-f]+)-([g-z])-")


class NamespacesUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces; the message says why in one line."""


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done


def available() -> str:
    """'' where namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns, veth pairs, unshare --uts --mount)"
    for tool in ("ip", "nsenter", "unshare", "mount", "hostname"):
        if not shutil.which(tool):
            return f"no `{tool}` on PATH"
    probe = f"{PREFIX}-{os.getpid():x}-z-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return ""


def _taken_networks() -> list[ipaddress.IPv4Network]:
    text = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
    found = []
    for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", text):
        try:
            found.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    return found


def _free_subnets(count: int, seed: int) -> list[ipaddress.IPv4Network]:
    """`count` /24s of 10.64.0.0/10 that no address or route of this machine overlaps."""
    taken, chosen = _taken_networks(), []
    for n in range(4096):
        index = (seed * 7919 + n) % (64 * 256)
        net = ipaddress.ip_network(f"10.{64 + index // 256}.{index % 256}.0/24")
        if not any(net.overlaps(other) for other in taken + chosen):
            chosen.append(net)
            if len(chosen) == count:
                return chosen
    raise RuntimeError("no free /24 in 10.64.0.0/10 for the nodes' network")


def _netns_inode(netns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return None


def processes_in(netns_names: list[str]) -> list[int]:
    """The pids whose network namespace is one of these."""
    inodes = {i for i in (_netns_inode(n) for n in netns_names) if i is not None}
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def make(folder: Path, names: list[str], second_nic: str | None = None) -> dict:
    """Namespaced nodes `names` on a new bridge; their state (also in folder/nodes.json), for start_in and remove."""
    why = available()
    if why:
        raise NamespacesUnavailable(why)
    remove_leftovers()
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    pid, letter = os.getpid(), "ghijklmnopqrstuvwxyz"[next(_made) % 20]
    tag = f"{pid:x}{letter}"
    net, other = _free_subnets(2, pid)
    hosts = list(net.hosts())
    state = {"tag": tag, "folder": str(folder), "bridge": f"{PREFIX}{tag}b", "subnet": str(net),
             "host_address": str(hosts[0]), "local": str(folder / "local"), "nodes": {}, "links": [],
             "ray_tmp_made": False}
    (folder / STATE).write_text(json.dumps(state))
    try:
        _ip("link", "add", state["bridge"], "type", "bridge")
        state["links"].append(state["bridge"])
        _ip("addr", "add", f"{hosts[0]}/{net.prefixlen}", "dev", state["bridge"])
        _ip("link", "set", state["bridge"], "up")
        if not RAY_TMP.exists():
            RAY_TMP.mkdir(mode=0o777)
            state["ray_tmp_made"] = True
        lines = ["127.0.0.1 localhost"]
        for i, name in enumerate(names):
            netns = f"{PREFIX}-{pid:x}-{letter}-{name}"
            address = str(hosts[i + 1])
            node = {"netns": netns, "address": address, "dir": str(folder / "nodes" / name), "second_nic": None}
            state["nodes"][name] = node
            _ip("netns", "add", netns)
            (folder / STATE).write_text(json.dumps(state))
            _ip("link", "set", "lo", "up", netns=netns)
            if name == second_nic:  # made before eth0 arrives: the first interface of `hostname -I`
                nic = str(list(other.hosts())[i])
                _ip("link", "add", "nic0", "type", "veth", "peer", "name", "nic0peer", netns=netns)
                _ip("addr", "add", f"{nic}/{other.prefixlen}", "dev", "nic0", netns=netns)
                _ip("link", "set", "nic0", "up", netns=netns)
                _ip("link", "set", "nic0peer", "up", netns=netns)
                node["second_nic"] = {"name": "nic0", "address": nic}
            outside, inside = f"{PREFIX}{tag}h{i}", f"{PREFIX}{tag}p{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            state["links"].append(outside)
            _ip("link", "set", inside, "netns", netns)
            _ip("link", "set", outside, "master", state["bridge"], "up")
            _ip("link", "set", inside, "name", "eth0", netns=netns)
            _ip("addr", "add", f"{address}/{net.prefixlen}", "dev", "eth0", netns=netns)
            _ip("link", "set", "eth0", "up", netns=netns)
            for sub in ("", "ray", "local"):
                Path(node["dir"], sub).mkdir(parents=True, exist_ok=True)
            lines.append(f"{address} {name}")
        (folder / "hosts").write_text("\n".join(lines) + "\n")
        (folder / "local").mkdir(exist_ok=True)  # each node's own folder is mounted here, in its namespace only
        (folder / STATE).write_text(json.dumps(state))
    except BaseException:
        remove(state)
        raise
    return state


def start_in(state: dict, name: str, command: list[str], env: dict | None = None, **popen) -> subprocess.Popen:
    """`command` on node `name`: in its network namespace, with its hostname, its /etc/hosts, its own /tmp/ray and
    its own folder at state["local"] (its local disk), in a new session."""
    node, folder = state["nodes"][name], state["folder"]
    setup = ('hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && mount --bind "$5" "$6" '
             '&& shift 6 && exec "$@"')
    # nsenter, not `ip netns exec`, which mounts a sysfs of its own at /sys (no /sys/fs/cgroup: slurmd refuses it)
    argv = ["nsenter", f"--net=/run/netns/{node['netns']}", "unshare", "--uts", "--mount", "--propagation", "private",
            "--", "sh", "-c", setup, "node", name, f"{folder}/hosts", f"{node['dir']}/local", state["local"],
            f"{node['dir']}/ray", str(RAY_TMP), *command]
    return subprocess.Popen(argv, env=env, start_new_session=True, **popen)


def run_in(state: dict, name: str, command: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess:
    """`command` on node `name` (as start_in), its output captured."""
    proc = start_in(state, name, command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout_s)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def remove(state: dict) -> None:
    """Every process in the nodes' namespaces (SIGKILL: what was asked to stop has had its chance), the namespaces,
    the links, and /tmp/ray if it was made here and is empty again."""
    names = [node["netns"] for node in state["nodes"].values()]
    for _ in range(50):
        pids = processes_in(names)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for netns in names:
        _ip("netns", "del", netns, check=False)
    for link in reversed(state["links"]):
        _ip("link", "del", link, check=False)
    if state.get("ray_tmp_made"):
        try:
            RAY_TMP.rmdir()
        except OSError:
            pass
    state_file = Path(state["folder"]) / STATE
    state_file.unlink(missing_ok=True)


def remove_leftovers() -> list[str]:
    """Namespaces and links named by a process of this module that no longer runs: removed; their names."""
    gone: dict[str, list[str]] = {}
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        netns = line.split()[0] if line.split() else ""
        match = _NAME.match(netns)
        if match and not Path(f"/proc/{int(match.group(1), 16)}").exists():
            gone.setdefault(match.group(1) + match.group(2), []).append(netns)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        link = re.match(rf"^\d+: ({PREFIX}([0-9a-f]+)([g-z])[bh]\d*)[@:]", line)
        if link and not Path(f"/proc/{int(link.group(2), 16)}").exists():
            gone.setdefault(link.group(2) + link.group(3), [])
            gone[link.group(2) + link.group(3)].append("link:" + link.group(1))
    removed = []
    for items in gone.values():
        netns = [i for i in items if not i.startswith("link:")]
        links = [i.removeprefix("link:") for i in items if i.startswith("link:")]
        remove({"folder": "/nonexistent", "nodes": {n: {"netns": n} for n in netns}, "links": links})
        removed += items
    return removed
