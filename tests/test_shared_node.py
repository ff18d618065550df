"""Another local user of the node against the run: a real second uid (useradd, driven with setpriv;
tests/testkit/second_user.py) tries what a user of a shared node can, while root's run (the relay as the launcher
runs it, the launcher's own files, its spool) goes on. Each attack is made for real and what it got is read back:
- connections to the run's relay from the other uid: held idle by the hundred, or carrying 8 MiB bodies to the health
  route (the relay serves the run's own processes: the other uid's connections are closed before they cost a slot,
  a thread or a byte of body);
- the trace spool: made first under the shared /var/tmp-like folder, or swapped (renamed away, another put in its
  place) while the relay runs, with a planted record meant to reach W&B with the owner's key;
- a group-writable OUTPUT_DIR: links planted where the launcher writes its relay log, its summary, the stop files;
  a stop request written by the other user.
Skipped, saying why, where no second user can be made (not root)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes import folder_guard
from recipes.folder_guard import MARKER, FolderRefused
from recipes.launch import relays
from recipes.launch.knobs import Knobs
from recipes.trace_relay.names import RELAY_HEALTH_PATH
from recipes.trainer import stop_request
from testkit.relay_process import RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
PROJECT = "loopback-entity/shared-node"
VICTIM_TEXT = "export PATH=/usr/bin  # the victim's own file\n"

HOLD_IDLE = """
import json, socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = []
for _ in range(count):
    try:
        held.append(socket.create_connection((host, port), timeout=5))
    except OSError:
        break
print(json.dumps({"opened": len(held)}), flush=True)
sys.stdin.readline()  # hold them until told
served = 0  # still open, waiting for a request: a slot of the relay
for sock in held:
    sock.settimeout(0.05)
    try:
        sock.recv(100)  # b"": closed by the relay; a 503: turned away
    except (TimeoutError, socket.timeout):
        served += 1
    except OSError:
        pass
print(json.dumps({"served": served}), flush=True)
"""

BIG_BODIES = """
import json, socket, sys, threading
host, port, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sent, held = [], []
def one():
    sock = socket.create_connection((host, port), timeout=10)
    held.append(sock)
    done = 0
    try:
        sock.sendall(f"GET /trace_relay/health HTTP/1.1\\r\\nHost: r\\r\\nContent-Length: {size}\\r\\n\\r\\n".encode())
        chunk = b"x" * 65536
        while done < size:
            done += sock.send(chunk[: size - done])
    except OSError:
        pass
    sent.append(done)
threads = [threading.Thread(target=one) for _ in range(count)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"sent": sum(sent)}), flush=True)
sys.stdin.readline()  # the connections stay open while the relay's memory is read
"""


def call_batch(*ids: str, project: str = PROJECT) -> bytes:
    return json.dumps({"batch": [{"project_id": project, "id": i, "trace_id": "t", "op_name": "op",
                                  "started_at": "2024-01-01T00:00:00Z", "ended_at": "2024-01-01T00:00:01Z",
                                  "inputs": {}, "output": 1} for i in ids]}).encode()


def post(url: str, token: str, body: bytes, route: str = f"/traces/v2/{PROJECT}/calls/complete") -> int | None:
    import base64

    auth = base64.b64encode(f"api:{token}".encode()).decode()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = (f"POST {route} HTTP/1.1\r\nHost: r\r\nAuthorization: Basic {auth}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head + body)
            answer = sock.recv(100)
    except OSError:
        return None
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None


def host_port(url: str) -> tuple[str, str]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, port


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def relay(tmp_path):
    relay = RelayProcess(tmp_path / "spool", "--offline", "--entity", "loopback-entity")
    try:
        yield relay
    finally:
        relay.stop()


def test_another_users_idle_connections_cost_the_relay_nothing(second_user, relay):
    """600 idle connections from the other uid (the relay serves 128 at once): the run's own 40 writes all answered,
    no connection of the other user's held, no thread spent on them."""
    threads_before = threads_of(relay.serving_pid)
    attacker = second_user.start_python(HOLD_IDLE, *host_port(relay.url), "600", stdin=-1)
    try:
        opened = json.loads(attacker.stdout.readline())["opened"]
        time.sleep(1.0)  # every connection accepted (or refused) by now
        threads_during = threads_of(relay.serving_pid)
        answered = sum(post(relay.url, relay.token, call_batch(f"own-{i}")) == 200 for i in range(40))
        attacker.stdin.write("\n")
        attacker.stdin.flush()
        served = json.loads(attacker.stdout.readline())["served"]
    finally:
        attacker.kill()
        attacker.wait()
    print(f"\n[shared node] {opened} idle connections of uid {second_user.uid}: the run's writes answered "
          f"{answered}/40, the other user's connections held by the relay {served}, relay threads {threads_before} "
          f"-> {threads_during}")
    assert opened >= 500, opened
    assert answered == 40
    assert served == 0
    assert threads_during <= threads_before + 4, (threads_before, threads_during)


def test_another_users_bodies_are_never_read(second_user, relay):
    """32 x 8 MiB bodies to the health route from the other uid: the relay reads none of them (its memory stays)."""
    pid = relay.serving_pid
    before = rss_bytes(pid)
    attacker = second_user.start_python(BIG_BODIES, *host_port(relay.url), "32", str(8 * 2 ** 20), stdin=-1)
    try:
        sent = json.loads(attacker.stdout.readline())["sent"]
        time.sleep(1.0)
        grown = rss_bytes(pid) - before
    finally:
        attacker.kill()
        attacker.wait()
    print(f"\n[shared node] 32 x 8 MiB bodies from uid {second_user.uid}: {sent / 2 ** 20:.0f} MiB sent, the relay's "
          f"memory {grown / 2 ** 20:+.0f} MiB")
    assert grown < 32 * 2 ** 20, grown
    assert post(relay.url, relay.token, call_batch("after")) == 200  # the run's own client still served


# --- the spool ------------------------------------------------------------------------------------------------

SWAP_SPOOL = """
import json, os, sys, time
spool, node = sys.argv[1], sys.argv[2]
record = sys.argv[3].encode()
def planted(folder):
    segments = os.path.join(folder, "segments")
    os.makedirs(segments, mode=0o777, exist_ok=True)
    header = json.dumps({"route": "/v2/attacker/planted-project/calls/complete", "content_type": "application/json",
                         "headers": {}, "project_id": "attacker/planted-project", "digest": None, "row_digests": [],
                         "length": len(record)}).encode()
    for number in (1, 2, 3):
        with open(os.path.join(segments, "%08d.spool" % number), "wb") as f:
            f.write(header + b"\\n" + record + b"\\n")
deadline = time.time() + 60
while not os.path.isdir(os.path.join(spool, "segments")) and time.time() < deadline:
    time.sleep(0.05)
# the highest folder of the run's on the way whose parent this user may write: renamed away, its path made again
folder = spool
while not os.access(os.path.dirname(folder), os.W_OK) and os.path.dirname(folder) != folder:
    folder = os.path.dirname(folder)
try:
    os.rename(folder, os.path.join(os.path.dirname(folder), ".moved-away"))
    planted(spool)
    print("swapped %s" % folder, flush=True)
except OSError as err:
    print("could not: %s" % err, flush=True)
"""


def planted_batch() -> str:
    return call_batch("planted-by-another-user", project="attacker/planted-project").decode()


def spool_plan(knobs: Knobs, cluster: bool) -> relays.RelayPlan:
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"trace": {"backend": "weave"}}},
                               "trainer": {"experiment_name": knobs.experiment_name,
                                           "default_local_dir": f"{knobs.output_dir}/checkpoints"}})
    return relays.relay_plan(knobs, config, cluster=cluster, environ={})


def attack_spool(second_user, spool: Path) -> tuple[str, set[str], set[str], list[str]]:
    """The relay (root's, forwarding with the owner's key) on `spool`; the other user swaps the spool for one of its
    own while the relay runs, and the run writes a call. What the relay said at start, the calls and the projects
    W&B received, and W&B's GraphQL requests."""
    with loopback_wandb() as wandb:
        swapper = second_user.start_python(SWAP_SPOOL, str(spool), "node", planted_batch())
        try:
            relay = RelayProcess(spool, "--upstream", wandb.url, WANDB_API_KEY=API_KEY)
        except AssertionError as refused:  # the relay did not start: what it said
            swapper.kill()
            swapper.wait()
            return str(refused), set(), set(), []
        try:
            said = swapper.stdout.readline().strip()
            time.sleep(0.5)
            assert post(relay.url, relay.token, call_batch("own-call")) == 200
            wandb.wait_for_calls(2, timeout_s=8)  # the run's call, and any planted one
        finally:
            swapper.kill()
            swapper.wait()
            relay.stop()
        calls = set(wandb.storage.complete_call_ids())
        projects = {call.get("project_id") for call in wandb.storage.recorded_calls()}
        graphql = [route for method, route in wandb.app.requests if route == "/graphql"]
    return said, calls, projects, graphql


def test_the_cluster_spool_base_is_the_users_own_and_a_base_made_first_by_another_user_is_refused(
        second_user, shared_base, monkeypatch):
    """The default spool base lies in a sticky folder anyone may write (/var/tmp): the other user makes it first, then
    swaps the run's spool inside it for one of its own while the relay runs."""
    vartmp = shared_base / "var_tmp"
    vartmp.mkdir()
    vartmp.chmod(0o1777)
    monkeypatch.setattr(relays, "SPOOL_PARENT", str(vartmp))
    knobs = Knobs(experiment_name="shared-node", output_dir=str(shared_base / "out"))
    spool = Path(spool_plan(knobs, cluster=True).spool) / "node"
    base = spool.parent.parent
    made = second_user.run(["mkdir", "-m", "777", str(base)])
    assert made.returncode == 0, made.stderr  # anyone may make it first: the relay must not take it
    said, calls, projects, graphql = attack_spool(second_user, spool)
    print(f"\n[shared node] spool base {base} made first by uid {second_user.uid}: W&B received {sorted(calls)}, "
          f"projects {sorted(projects)}; relay said: {said[-300:]!r}")
    assert "planted-by-another-user" not in calls and "attacker/planted-project" not in projects
    assert "own-call" in calls or "another user" in said, said


def test_a_spool_in_a_folder_others_can_write_is_refused(second_user, shared_base):
    """TRACE_SPOOL inside a group-writable OUTPUT_DIR: the other user renames it away and puts its own in its place."""
    out = second_user.shared_folder(shared_base / "out")
    said, calls, projects, _ = attack_spool(second_user, out / "trace_spool")
    print(f"\n[shared node] spool in a group-writable folder: W&B received {sorted(calls)}; relay said: "
          f"{said[-300:]!r}")
    assert "planted-by-another-user" not in calls and "attacker/planted-project" not in projects
    assert "written by another user" in said, said


def test_the_one_node_spool_leaves_an_output_dir_others_can_write(second_user, shared_base):
    out = second_user.shared_folder(shared_base / "out")
    knobs = Knobs(experiment_name="shared-node", output_dir=str(out))
    spool = spool_plan(knobs, cluster=False).spool
    assert not spool.startswith(str(out)), spool
    mine = spool_plan(Knobs(experiment_name="shared-node", output_dir=str(shared_base / "private")), cluster=False)
    assert mine.spool == str(shared_base / "private" / "trace_spool")  # a folder only the run's user can write


# --- a group-writable OUTPUT_DIR ------------------------------------------------------------------------------

def victim_file(shared_base: Path) -> Path:
    home = shared_base / "victim_home"
    home.mkdir(mode=0o755)
    bashrc = home / ".bashrc"
    bashrc.write_text(VICTIM_TEXT)
    return bashrc


def test_links_planted_in_the_output_dir_are_never_written_through(second_user, shared_base):
    """The other user points the relay's log, the run summary's temporary file and the stop files' temporary file at
    the victim's .bashrc, and plants a stop request of its own: none is written through, none is obeyed."""
    out = second_user.shared_folder(shared_base / "out")
    checkpoints = second_user.shared_folder(out / "checkpoints")
    bashrc = victim_file(shared_base)
    plant = ["ln", "-s", str(bashrc)]
    for link in (out / "trace_relay.log", out / f".{relays.SUMMARY_FILE}.tmp",
                 checkpoints / f".{stop_request.REQUEST_FILE}.{os.getpid()}.tmp"):
        made = second_user.run([*plant, str(link)])
        assert made.returncode == 0, made.stderr
    made = second_user.run(["sh", "-c", f"echo '{{\"why\": \"another user\"}}' > {checkpoints / 'stop_request.json'}"])
    assert made.returncode == 0, made.stderr
    plan = relays.RelayPlan(cluster=False, spool=str(shared_base / "spool"), offline=True, entity="e",
                            log=str(out / "trace_relay.log"))
    outcome = "started"
    try:
        started = relays.start_relays(plan)
        relays.say_summaries(started.stop(), str(out))
    except (relays.RelayStartError, OSError) as err:
        outcome = f"refused: {err}"
    obeyed = stop_request.stop_requested(checkpoints)
    try:
        stop_request.request_stop(checkpoints, "the run's own")
    except OSError as err:
        outcome += f"; stop request refused: {err}"
    print(f"\n[shared node] links to {bashrc} in a group-writable OUTPUT_DIR: {outcome}; the other user's stop "
          f"request read as {obeyed}")
    assert bashrc.read_text() == VICTIM_TEXT
    assert obeyed is None


def test_health_needs_the_token_before_any_body(relay):
    """The run's own uid, without the token: the health route answers 401 from the headers."""
    host, port = host_port(relay.url)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {RELAY_HEALTH_PATH} HTTP/1.1\r\nHost: r\r\nContent-Length: {8 * 2 ** 20}\r\n\r\n".encode())
        answer = sock.recv(100)
    assert answer.startswith(b"HTTP/1.1 401"), answer


# --- the folder guard ---------------------------------------------------------------------------------------

EXCHANGE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
first, second = sys.argv[1].encode(), sys.argv[2].encode()
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("racing", flush=True)
while True:
    libc.renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE)
"""


def victim_home(shared_base: Path) -> Path:
    home = shared_base / "victim_home"
    (home / "thesis").mkdir(parents=True)
    (home / "thesis" / "draft.tex").write_text("years of work")
    (home / ".bashrc").write_text(VICTIM_TEXT)
    return home


def test_the_folder_guard_cannot_be_raced_into_emptying_a_home(second_user, shared_base, monkeypatch):
    """The run's marked folder lies in a folder the other user may write: it swaps the marked folder with a link to
    the victim's home (renameat2 RENAME_EXCHANGE, in a loop) while the run empties the marked folder again and again."""
    runs = second_user.shared_folder(shared_base / "runs")
    home = victim_home(shared_base)
    monkeypatch.setenv("HOME", str(home))
    marked = runs / "smoke"
    folder_guard.clear(marked, "smoke_cpu", "OUTPUT_DIR")
    made = second_user.run(["ln", "-s", str(home), str(runs / "decoy")])
    assert made.returncode == 0, made.stderr
    held = os.open(marked, os.O_RDONLY | os.O_DIRECTORY)  # the run's files go into the folder, whatever its name now
    racer = second_user.start_python(EXCHANGE, str(marked), str(runs / "decoy"))
    tries, refused, errors, lost = 0, 0, [], None
    try:
        assert racer.stdout.readline().strip() == "racing"
        for tries in range(1, 2001):
            os.close(os.open("checkpoint.pt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=held))
            try:
                folder_guard.clear(marked, "smoke_cpu", "OUTPUT_DIR")
            except FolderRefused:
                refused += 1
            except OSError as err:  # the guard tripping over the swap half-way
                errors.append(f"{type(err).__name__}: {err}")
            if not (home / "thesis" / "draft.tex").exists() or not (home / ".bashrc").exists():
                lost = tries
                break
    finally:
        racer.kill()
        racer.wait()
        os.close(held)
    print(f"\n[shared node] the folder guard raced {tries} time(s) by uid {second_user.uid}: the home "
          f"{'emptied at try ' + str(lost) if lost else 'kept'}, {refused} clears refused, {len(errors)} failed "
          f"half-way {errors[:1]}")
    assert lost is None
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "thesis"]  # no marker written there either
    assert errors == []


def test_a_folder_or_a_marker_of_another_users_is_never_emptied(second_user, shared_base):
    runs = second_user.shared_folder(shared_base / "runs")
    theirs = runs / "theirs"
    made = second_user.run(["sh", "-c", f"mkdir -m 777 {theirs} && echo smoke_cpu > {theirs}/{MARKER}"])
    assert made.returncode == 0, made.stderr
    (theirs / "global_step_40.pt").write_text("the run's checkpoint, kept where the other user said")
    with pytest.raises(FolderRefused) as folder:
        folder_guard.clear(theirs, "smoke_cpu", "OUTPUT_DIR")
    assert (theirs / "global_step_40.pt").exists()
    mine = second_user.shared_folder(runs / "mine")  # the run's own folder, which the other user may write
    (mine / "model.pt").write_text("the run's model")
    made = second_user.run(["sh", "-c", f"echo smoke_cpu > {mine}/{MARKER}"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(FolderRefused) as marker:
        folder_guard.clear(mine, "smoke_cpu", "OUTPUT_DIR")
    assert (mine / "model.pt").exists()
    print(f"\n[shared node] {folder.value}\n[shared node] {marker.value}")
