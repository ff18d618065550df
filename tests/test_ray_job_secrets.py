"""The W&B key a Ray job ships (SUBMIT=ray) is read by the job's workers on every node and by no other user of those
nodes. A real token-auth Ray cluster of two nodes on this machine (tests/conftest.py `ray_cluster`), the job submitted
as recipes/launch/ray_job.py submits it; while it runs and after, a second local user (tests/testkit/second_user.py)
reads everything it can of what Ray wrote (each node's temp dir: session logs, runtime_resources, the uploaded
packages, zips opened), of /dev/shm, and every process's command line and environment, looking for the key and for
the cluster's token."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from recipes.launch import ray_job
from testkit.ray_auth import cluster_auth

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SECRET = "wandb-key-only-the-owner-reads-" + os.urandom(8).hex()

PROBE = """
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
ray.init(runtime_env=get_ppo_ray_runtime_env())  # as main_ppo does
@ray.remote(num_cpus=0)
def seen():  # the key's digest, not the key: the job's log is no place for it either
    import hashlib
    return hashlib.sha256((os.environ.get("WANDB_API_KEY") or "").encode()).hexdigest()
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
got = ray.get([seen.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
               for node in nodes])
print("PROBE " + json.dumps({"nodes": len(nodes), "digests": got}))
"""

WATCH = r"""
import ctypes, io, json, os, select, struct, sys, zipfile
# what to look for comes on stdin (a command line is anyone's to read); the folders to watch in argv
needles = {name: value.encode() for name, value in json.loads(sys.stdin.readline()).items()}
roots = json.loads(sys.argv[1])
found, counts, seen = set(), {"files read": 0, "unreadable": 0, "zips": 0, "command line scans": 0}, set()

def look(where, data):
    for name, value in needles.items():
        if value in data:
            found.add(f"{name} in {where}")
    if data[:4] == b"PK\x03\x04":
        counts["zips"] += 1
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for member in archive.namelist():
                    look(f"{where}!{member}", archive.read(member))
        except Exception:
            pass

held = {}  # path -> a file opened the moment it appeared: read once written, even if Ray deletes it at once


def look_at_processes(part, what):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                look(f"{what} of pid {pid}", handle.read())
        except OSError:
            pass


def hold(path):
    try:
        held.setdefault(path, os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
    except OSError:
        pass


def read(path):
    fd = held.pop(path, None)
    try:
        if fd is None:
            if os.path.islink(path) or not os.path.isfile(path):
                return
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if os.fstat(fd).st_size > 64 << 20:
            return
        data = os.pread(fd, 64 << 20, 0)
    except OSError:
        counts["unreadable"] += 1
        return
    finally:
        if fd is not None:
            os.close(fd)
    counts["files read"] += 1
    look(path, data)

# every file Ray writes under the roots, as it is written (inotify: a file Ray deletes soon after is read too)
libc = ctypes.CDLL(None, use_errno=True)
IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x8, 0x80, 0x100, 0x40000000
inotify = libc.inotify_init1(os.O_NONBLOCK)
folders = {}

def watch(path):
    wd = libc.inotify_add_watch(inotify, path.encode(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)
    if wd >= 0:
        folders[wd] = path
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            watch(entry.path)
        else:
            read(entry.path)

for root in roots:
    watch(root)
print("watching", flush=True)
loops = 0
while True:
    ready = select.select([inotify, sys.stdin], [], [], 0.005)[0]
    loops += 1
    if loops % 4 == 0:
        counts["command line scans"] += 1
        look_at_processes("cmdline", "the command line")
    if inotify in ready:
        try:
            data = os.read(inotify, 1 << 16)
        except BlockingIOError:
            data = b""
        offset = 0
        while offset < len(data):
            wd, mask, _, size = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16: offset + 16 + size].rstrip(b"\0").decode(errors="replace")
            offset += 16 + size
            path = os.path.join(folders.get(wd, ""), name)
            if mask & IN_ISDIR:
                watch(path)
            elif mask & IN_CREATE:
                hold(path)
            elif mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                read(path)
    if sys.stdin in ready:
        break
for path in list(held):
    read(path)
for root in roots:  # and everything left at the end
    for folder, _, files in os.walk(root, onerror=lambda err: None):
        for name in files:
            read(os.path.join(folder, name))
look_at_processes("environ", "the environment")
print(json.dumps({"found": sorted(found), **counts}), flush=True)
"""


def test_no_other_user_of_a_node_reads_the_key_a_job_ships(ray_cluster, second_user):
    import hashlib

    from ray.job_submission import JobStatus

    roots = [*ray_cluster["temp_dirs"], "/dev/shm"]
    with cluster_auth(ray_cluster["env"]):
        token = ray_job.cluster_token()
        needles = {"the W&B key": SECRET, "the cluster's token": token}
        watcher = second_user.start_python(WATCH, json.dumps(roots), stdin=-1)
        watcher.stdin.write(json.dumps(needles) + "\n")
        watcher.stdin.flush()
        assert watcher.stdout.readline().strip() == "watching", watcher.stderr.read()[-2000:]
        client = ray_job.connect(ray_cluster["dashboard"])
        environ = {"WANDB_API_KEY": SECRET, "WANDB_ENTITY": "my-team", "HOME": "/nonexistent",
                   "PATH": os.environ["PATH"]}
        job_id = ray_job.submit(client, None, environ, command=f"{shlex.quote(sys.executable)} -c {shlex.quote(PROBE)}",
                                address=ray_cluster["dashboard"])
        deadline = time.monotonic() + 240
        while not (status := client.get_job_status(job_id)).is_terminal():
            assert time.monotonic() < deadline, client.get_job_logs(job_id)[-2000:]
            time.sleep(1)
        logs = client.get_job_logs(job_id)
    time.sleep(1)
    watched = json.loads(watcher.communicate("stop\n", timeout=300)[0])
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    probe = json.loads(next(line for line in logs.splitlines() if line.startswith("PROBE "))[len("PROBE "):])
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert probe["nodes"] == 2 and probe["digests"] == [digest, digest], probe  # every node's worker has the key
    assert token and SECRET not in logs
    print(f"\n[ray secrets] as uid {second_user.uid}, during the job and after: {watched['files read']} files of "
          f"Ray's read ({watched['zips']} zips opened, {watched['unreadable']} unreadable), every command line read "
          f"{watched['command line scans']} times: found {watched['found']}")
    assert watched["files read"] > 0  # Ray's folders are open to another user: the watch reached them
    assert watched["found"] == []


def test_no_secret_is_shipped_to_a_cluster_without_authentication():
    """A cluster that runs without Ray's token auth would give the key to anyone who reaches its ports: the
    submission is refused, in one line, before anything is sent."""
    sent = []

    class Client:
        def submit_job(self, **job):
            sent.append(job)
            return "never"

    with mock.patch.object(ray_job, "cluster_auth_mode", lambda address, timeout_s=10.0: "disabled"):
        with pytest.raises(ray_job.OpenCluster) as refused:
            ray_job.submit(Client(), None, {"WANDB_API_KEY": SECRET}, address="http://127.0.0.1:8265")
    assert sent == [] and "\n" not in str(refused.value) and "RAY_AUTH_MODE=token" in str(refused.value)


def test_the_shipped_module_holds_the_key_sealed():
    """What Ray stores (the uploaded package) holds the secrets sealed with a key derived from the cluster's token;
    another token cannot open it."""
    from cryptography.exceptions import InvalidTag

    sealed = ray_job.seal({"WANDB_API_KEY": SECRET}, "token-of-the-cluster")
    assert SECRET not in sealed
    assert ray_job.unseal(sealed, "token-of-the-cluster") == {"WANDB_API_KEY": SECRET}
    with pytest.raises(InvalidTag):
        ray_job.unseal(sealed, "another-token")
    package = ray_job.write_secrets_module(sealed, Path(os.environ.get("TMPDIR", "/tmp")) / f"s{os.getpid()}")
    try:
        assert SECRET not in (package / "__init__.py").read_text()
    finally:
        import shutil

        shutil.rmtree(package.parent, ignore_errors=True)
