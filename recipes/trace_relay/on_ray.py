"""A trace relay on every node of a Ray cluster: one keeper actor per node, pinned to it, found by name.

When main_ppo runs on a Ray cluster (a Ray job from scripts/submit_multinode.sh, or RAY_ADDRESS), its workers on
other nodes neither inherit the launcher's environment nor reach the launcher node's loopback. So the launcher
(recipes/launch/relays.py) starts, on every alive node, a `NodeRelayKeeper` actor with a hard node affinity (it runs
there or nowhere; Ray starts it again there if it dies: max_restarts=-1). Each keeper holds one loopback address of
its node and keeps a relay process serving it (recipes/trace_relay/keeper.py: replaced when it dies or stops
answering), spooling to that node's disk, under `spool_base/<node>`. An agent-loop worker asks for the keeper of
its own node by name (`<run>/<node id>`, namespace NAMESPACE; `run` is derived from the config every worker gets)
and points its weave client at the URL, with the run's token, that the keeper answers
(recipes.trace_relay.client.use_trace_relay). The token (RelaySettings.token, made by the launcher for this
launch) travels as the keepers' constructor argument and their answer to the workers, inside the cluster: whoever can
reach Ray's own ports can read it, as they can run any code there (docs/multi-node.md: a closed cluster). Each
keeper hands it to its relay in the environment, never on a command line. A keeper started again by Ray
binds the same port (kept in its spool folder), so workers keep their URL. The launcher also asks each keeper how
it is every WATCH_EVERY_S: one that does not answer in KEEPER_ANSWER_S (stopped, deadlocked) is killed and Ray
starts it again; a node that joins later gets its keeper then. At the end `stop()` drains every node's relay and
returns what each sent and what is left, per node.

The process whose command line names `trace_relay` is the relay (what a check stops or kills); the keeper's
process is `ray::NodeRelayKeeper`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recipes.private_files import Folder
from recipes.trace_relay.keeper import HANG_AFTER_S, RelayKeeper
from recipes.trace_relay.names import KEEPER_ANSWER_S, NAMESPACE, TRACE_RELAY_TOKEN_ENV, keeper_name, node_label

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 180.0  # a relay imports weave before it answers: slow on a busy node
WATCH_EVERY_S = 5.0
STATE_FILE = "keeper.json"  # in a node's spool folder: the port its keeper serves, kept across keeper restarts


@dataclass(frozen=True)
class RelaySettings:
    """How every node's relay runs: spool_base/<node> on each node's own disk; offline: keep, never send."""

    spool_base: str
    offline: bool = False
    entity: str | None = None
    drain_timeout_s: float = 120.0
    hang_after_s: float = HANG_AFTER_S
    token: str = field(default="", repr=False)  # the run's secret: the relays' environment, never their argv

    def relay_argv(self, spool: Path) -> list[str]:
        argv = ["--spool", str(spool), "--drain-timeout", str(self.drain_timeout_s)]
        if self.offline:
            argv += ["--offline", "--entity", str(self.entity)]
        return argv


@dataclass
class NodeSummary:
    """One node's relay at the end of a run."""

    node: str
    spool: str
    sent: int
    pending: int
    rejected: int = 0
    replaced: int = 0  # relays started again after one died or stopped answering
    hangs: int = 0
    status: int | None = None  # the last relay's exit status (0: nothing left, 3: records pending)
    error: str | None = None  # why no summary came from the node itself
    extra: dict = field(default_factory=dict)
    sent_bytes: int = 0  # the request bodies W&B accepted (trace data as W&B counts it)

    def line(self) -> str:
        from recipes.trace_relay.spool import Summary

        text = f"trace relay on {self.node}: " + Summary(self.sent, self.pending, self.rejected,
                                                          sent_bytes=self.sent_bytes).line(self.spool)
        if self.replaced:
            text += f"; relay replaced {self.replaced} time(s) ({self.hangs} of them for not answering)"
        if self.error:
            text += f" ({self.error})"
        return text


def spool_summary(node: str, spool: Path, keeper: RelayKeeper | None = None, status: int | None = None,
                  error: str | None = None) -> NodeSummary:
    """What a node's spool holds now, read from its files (nothing needs to be running)."""
    from recipes.trace_relay.spool import Spool, rejected_count

    counts = Spool(spool) if (spool / "segments").is_dir() else None
    rejected = rejected_count(spool)
    return NodeSummary(node=node, spool=str(spool), sent=(counts.sent_count - rejected) if counts else 0,
                       sent_bytes=counts.sent_bytes if counts else 0,
                       pending=counts.pending_count if counts else 0, rejected=rejected,
                       replaced=keeper.replaced if keeper else 0, hangs=keeper.hangs if keeper else 0,
                       status=status, error=error)


class NodeRelayKeeper:
    """The Ray actor (made one with ray.remote in ClusterRelays) that keeps its node's relay."""

    def __init__(self, settings: RelaySettings, run: str) -> None:
        import ray

        _log_to_stderr()
        context = ray.get_runtime_context()
        node_id = context.get_node_id()
        ip = ray.util.get_node_ip_address()
        self.node = node_label(node_id, ip)
        self.spool = Path(settings.spool_base) / self.node
        self.token = settings.token
        self.refused: str | None = None  # why this node runs no relay (a spool folder the run cannot trust)
        self.keeper: RelayKeeper | None = None
        try:  # the node's spool folder, trusted (recipes/private_files.py): its own files are reached from it
            self.folder = Folder.trusted(self.spool, create=True, what="the trace spool")
        except OSError as err:
            self.refused = str(err)
            logger.error("trace relay keeper on %s: no relay: %s", self.node, err)
            return
        previous = _read_json(self.folder, STATE_FILE)
        port = previous["port"] if previous.get("run") == run else 0  # Ray started this keeper again: same URL
        log = self.spool / "relay.log"
        _log_to_file(self.folder, log.name)
        self.keeper = RelayKeeper(settings.relay_argv(self.spool), port=port, log=log,
                                  hang_after_s=settings.hang_after_s, env={TRACE_RELAY_TOKEN_ENV: settings.token})
        try:
            self.keeper.start()
        except OSError:
            if not port:
                raise
            logger.error("trace relay keeper: port %d of the previous keeper is taken; the workers of %s lose their "
                         "relay's address", port, self.node)
            self.keeper.port = 0
            self.keeper.start()
        self.folder.write(STATE_FILE, json.dumps({"run": run, "port": self.keeper.port, "pid": os.getpid()}))
        self.drain_timeout_s = settings.drain_timeout_s
        logger.info("trace relay keeper on %s: %s, spool %s", self.node, self.keeper.url, self.spool)

    def url(self) -> str:
        return self.keeper.url if self.keeper else ""

    def connection(self) -> tuple[str, str]:
        """What a worker of this node needs to trace through its relay: the URL and the run's token."""
        return (self.keeper.url, self.token) if self.keeper else ("", "")

    def wait_ready(self, timeout_s: float) -> bool:
        return self.keeper is not None and self.keeper.wait_ready(timeout_s)

    def refusal(self) -> str | None:
        return self.refused

    def status(self) -> dict:
        if self.keeper is None:
            return {"node": self.node, "url": "", "relay_pid": None, "keeper_pid": os.getpid(), "replaced": 0,
                    "hangs": 0, "spool": str(self.spool), "ended": True}
        return {"node": self.node, "url": self.keeper.url, "relay_pid": self.keeper.relay_pid,
                "keeper_pid": os.getpid(), "replaced": self.keeper.replaced, "hangs": self.keeper.hangs,
                "spool": str(self.spool), "ended": self.keeper.ended.is_set()}

    def stop(self) -> dict:
        if self.keeper is None:
            return asdict(NodeSummary(node=self.node, spool=str(self.spool), sent=0, pending=0, error=self.refused))
        status = self.keeper.stop(self.drain_timeout_s + 60)
        return asdict(spool_summary(self.node, self.spool, self.keeper, status))


class ClusterRelays:
    """One run's relays on a Ray cluster, as the launcher holds them (this process must be connected to Ray)."""

    def __init__(self, settings: RelaySettings, run: str) -> None:
        import ray

        self.settings, self.run = settings, run
        self._actor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(NodeRelayKeeper)
        self.keepers: dict[str, object] = {}  # node id -> actor handle
        self.keepers_restarted = 0
        self._stop_watching = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> ClusterRelays:
        """A keeper on every alive node, each with a relay that answers (RuntimeError naming the nodes if not)."""
        new = self.ensure_every_node()
        deadline = time.monotonic() + ready_timeout_s
        silent = [node for node in new if not self._answers(node, deadline)]
        refusals = sorted({why for why in map(self._refusal, silent) if why})
        if refusals:
            raise RuntimeError(f"no trace relay on {len(silent)} node(s): {'; '.join(refusals)}")
        if silent:
            raise RuntimeError(f"no trace relay answered within {ready_timeout_s:.0f} s on node(s) {silent}; see "
                               f"relay.log in their spool folders under {self.settings.spool_base}")
        self._watcher = threading.Thread(target=self._watch, name="relay-keepers", daemon=True)
        self._watcher.start()
        return self

    def _refusal(self, node: str) -> str | None:
        import ray

        try:
            return ray.get(self.keepers[node].refusal.remote(), timeout=KEEPER_ANSWER_S)
        except Exception:  # a keeper that cannot say: the generic line says where to look
            return None

    def _answers(self, node: str, deadline: float) -> bool:
        """Whether the node's keeper has a relay that answers before `deadline`. A keeper whose process died while
        starting is started again by Ray (max_restarts=-1); until then Ray says it is unavailable: ask again."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        while True:
            try:
                return ray.get(self.keepers[node].wait_ready.remote(max(deadline - time.monotonic(), 1.0)))
            except (ActorUnavailableError, RayActorError) as err:
                if time.monotonic() >= deadline:
                    return False
                logger.warning("relay keeper on node %s not reachable yet (%s); asking again", node,
                               type(err).__name__)
                time.sleep(1.0)

    def ensure_every_node(self) -> list[str]:
        """Start a keeper on each alive node that has none; the node ids it started one on."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        started = []
        for node in ray.nodes():
            node_id = node["NodeID"]
            if not node["Alive"] or node_id in self.keepers:
                continue
            self.keepers[node_id] = self._actor.options(
                name=keeper_name(self.run, node_id), namespace=NAMESPACE,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            ).remote(self.settings, self.run)
            started.append(node_id)
        return started

    def statuses(self, timeout_s: float = KEEPER_ANSWER_S) -> dict[str, dict | None]:
        """Each keeper's status; None for one that did not answer in time."""
        import ray

        refs = {node: handle.status.remote() for node, handle in self.keepers.items()}
        done, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        out = {}
        for node, ref in refs.items():
            try:
                out[node] = ray.get(ref, timeout=0) if ref in done else None
            except Exception:  # a keeper Ray is starting again, or one whose node died
                out[node] = None
        return out

    def _watch(self) -> None:
        import ray

        while not self._stop_watching.wait(WATCH_EVERY_S):
            try:
                self.ensure_every_node()
                for node, status in self.statuses().items():
                    if status is None and not self._stop_watching.is_set():
                        logger.warning("trace relay keeper of node %s does not answer: killing it (Ray starts it "
                                       "again there, on the same address)", node)
                        ray.kill(self.keepers[node], no_restart=False)
                        self.keepers_restarted += 1
            except Exception as err:  # the watch must outlive a hiccup of the cluster
                logger.warning("watching the trace relay keepers: %s: %s", type(err).__name__, err)

    def stop(self) -> list[NodeSummary]:
        """Drain every node's relay; what each sent and what is left, per node. The keepers end."""
        import ray

        self._stop_watching.set()
        if self._watcher is not None:
            self._watcher.join(timeout=KEEPER_ANSWER_S + 10)
        refs = {node: handle.stop.remote() for node, handle in self.keepers.items()}
        summaries = []
        for node, ref in refs.items():
            try:
                summaries.append(NodeSummary(**ray.get(ref, timeout=self.settings.drain_timeout_s + 120)))
            except Exception as err:
                summaries.append(NodeSummary(node=node[:8], spool=f"{self.settings.spool_base}/<{node[:8]}>",
                                             sent=0, pending=0, error=f"no summary from the node: {err}"[:300]))
        for handle in self.keepers.values():
            ray.kill(handle, no_restart=True)
        return summaries


def _read_json(folder: Folder, name: str) -> dict:
    try:
        return json.loads(folder.read_own(name) or b"{}")
    except ValueError:
        return {}


def _log_to_stderr() -> None:
    logging.getLogger("recipes.trace_relay").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")


def _log_to_file(folder: Folder, name: str) -> None:
    """The keeper's lines (replacements) go to the relay's log on the node too, beside what the relay says."""
    handler = logging.StreamHandler(os.fdopen(folder.open_file(name, os.O_WRONLY | os.O_APPEND), "a"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("recipes.trace_relay").addHandler(handler)
