"""The launch's trace relays: one on every node the agent-loop workers run on, started before main_ppo, drained after.

    plan = relay_plan(knobs, config, cluster=False)     # None: nothing traced, or TRACE_RELAY=off
    relays = start_relays(plan)                         # RelayStartError: nothing was started
    ... run main_ppo with relays.env ...
    for summary in relays.stop(): print(summary.line())

Each launch makes a token of its own (secrets.token_urlsafe): its relays answer only the clients that present it
(recipes/trace_relay/access.py). It is handed over in environments and Ray's calls, never on a command line, in a
file or in a plan. One node (main_ppo starts its own Ray): the launcher keeps that node's relay itself
(recipes/trace_relay/keeper.py, the token in the relay's environment) and hands its URL and the token down to
main_ppo's processes (TRACE_RELAY_ENV, TRACE_RELAY_TOKEN_ENV), whose Ray workers inherit them. A Ray cluster (a Ray
job, or RAY_ADDRESS): a keeper actor on every node (recipes/trace_relay/on_ray.py, the token its constructor's
argument), which the workers find by name and ask for the URL and the token; this process must be connected to the
cluster. Either way each relay spools to its own node's disk and is replaced when it dies or
stops answering; stop() drains each and says, per node, what was sent and what is left with the upload command.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from recipes.launch.knobs import Knobs
from recipes.private_files import Folder, why_untrusted
from recipes.trace_relay.keeper import HANG_AFTER_S, RelayKeeper
from recipes.trace_relay.names import TRACE_RELAY_ENV, TRACE_RELAY_TOKEN_ENV, run_key
from recipes.trace_relay.on_ray import NodeSummary, RelaySettings, spool_summary

# Where a node keeps its traces when TRACE_SPOOL is not set (on one node: when OUTPUT_DIR is not a folder only the
# run's user can write): a node's own disk that outlives the run (/var/tmp survives a reboot, unlike /tmp on many
# systems, and is not Ray's session dir, which Ray deletes), in a folder of the user's own (user_spool_base: named
# for the uid, made 0700; one that another user made first is refused), one folder per experiment; on a cluster
# each node's relay uses <that>/<node>.
SPOOL_PARENT = "/var/tmp"
LOCAL_READY_TIMEOUT_S = 120.0


def user_spool_base() -> str:
    """The user's own folder for trace spools on a node's disk."""
    return f"{SPOOL_PARENT}/gsm8k_recipe_traces-{os.geteuid()}"


class RelayStartError(RuntimeError):
    """No relay could be started; the message says why and what to do (nothing else was started)."""


@dataclass(frozen=True)
class RelayPlan:
    """The relays a launch runs. One node: `spool` is the relay's spool; a cluster: each node's is spool/<node>."""

    cluster: bool
    spool: str
    offline: bool = False
    entity: str | None = None
    log: str | None = None  # one node: the relay's log (a cluster: relay.log in each node's spool folder)
    run: str = ""  # a cluster: the run key the workers find their node's relay by
    hang_after_s: float = HANG_AFTER_S

    def settings(self, token: str = "") -> RelaySettings:
        return RelaySettings(spool_base=self.spool, offline=self.offline, entity=self.entity,
                             hang_after_s=self.hang_after_s, token=token)

    def describe(self, python: str = "python3") -> str:
        """One line for DRY_RUN: where the relays run and the command each keeper runs."""
        spool = f"{self.spool}/<node>" if self.cluster else self.spool
        command = " ".join([python, "-m", "recipes.trace_relay", "serve",
                            *self.settings().relay_argv(Path(spool)), "--listen-fd", "<its keeper's socket>"])
        where = ("a relay on every node of the Ray cluster, each spooling to its own disk"
                 if self.cluster else f"a relay on this node (log {self.log})")
        return f"{where}: {command}"


def relay_plan(knobs: Knobs, config, cluster: bool, environ: dict[str, str]) -> RelayPlan | None:
    """The relays for a launch whose composed config is `config`; None when no relay is needed."""
    from omegaconf import OmegaConf

    traced = OmegaConf.select(config, "actor_rollout_ref.rollout.trace.backend") == "weave"
    if knobs.trace_relay == "off" or not traced:
        return None
    own = f"{user_spool_base()}/{knobs.experiment_name}"
    if cluster:
        spool = knobs.trace_spool or own
        log = None
    else:  # beside the run's outputs, unless another user could write there (the relay sends a spool with the key)
        spool = knobs.trace_spool or (own if why_untrusted(knobs.output_dir) else f"{knobs.output_dir}/trace_spool")
        log = f"{knobs.output_dir}/trace_relay.log"
    return RelayPlan(cluster=cluster, spool=spool, offline=knobs.traces_kept_offline,
                     entity=environ.get("WANDB_ENTITY") if knobs.traces_kept_offline else None, log=log,
                     run=run_key(config) if cluster else "")


class Relays:
    """Started relays: `env` for main_ppo's processes, `where` they are (one line), `stop()` for the end."""

    env: dict[str, str] = {}
    where: str = ""

    def stop(self) -> list[NodeSummary]:
        raise NotImplementedError


def new_token() -> str:
    """The secret of one launch's relays and workers."""
    return secrets.token_urlsafe(32)


class LocalRelay(Relays):
    def __init__(self, plan: RelayPlan) -> None:
        self.plan = plan
        self.token = new_token()
        self.keeper = RelayKeeper(plan.settings().relay_argv(Path(plan.spool)), log=plan.log,
                                  hang_after_s=plan.hang_after_s, env={TRACE_RELAY_TOKEN_ENV: self.token})

    def start(self, ready_timeout_s: float = LOCAL_READY_TIMEOUT_S) -> LocalRelay:
        try:
            self.keeper.start()
        except PermissionError as err:  # its log: a link, another user's file (recipes/private_files.py)
            raise RelayStartError(f"the trace relay's log: {err}") from err
        except OSError as err:
            raise RelayStartError(f"the trace relay cannot listen on 127.0.0.1: {err}") from err
        if not self.keeper.wait_ready(ready_timeout_s):
            tail = self.keeper.log_tail(3)
            self.keeper.stop(30)
            raise RelayStartError("the trace relay did not start (log: {}):\n{}\nTRACE_RELAY=off sends traces "
                                  "straight to W&B instead".format(self.plan.log, "\n".join(tail)))
        self.env = {TRACE_RELAY_ENV: self.keeper.url, TRACE_RELAY_TOKEN_ENV: self.token}
        self.where = f"the trace relay {self.keeper.url} (spool {self.plan.spool}, log {self.plan.log})"
        return self

    def stop(self) -> list[NodeSummary]:
        status = self.keeper.stop()
        summary = spool_summary(socket.gethostname(), Path(self.plan.spool), self.keeper, status)
        if status not in (0, 3):  # 3: records pending, said in the summary
            summary.error = f"the relay exited with status {status}; its log: {self.plan.log}"
        return [summary]


class ClusterRelays(Relays):
    def __init__(self, plan: RelayPlan) -> None:
        from recipes.trace_relay.on_ray import ClusterRelays as OnRay

        self.plan = plan
        self.on_ray = OnRay(plan.settings(new_token()), plan.run)

    def start(self) -> ClusterRelays:
        try:
            self.on_ray.start()
        except Exception as err:
            self.on_ray.stop()
            raise RelayStartError(f"{err}; TRACE_RELAY=off sends traces straight to W&B instead") from err
        nodes = len(self.on_ray.keepers)
        self.where = (f"a trace relay on each of the cluster's {nodes} node(s) (spool {self.plan.spool}/<node> on "
                      "each node's own disk, its log relay.log there)")
        return self

    def stop(self) -> list[NodeSummary]:
        return self.on_ray.stop()


def start_relays(plan: RelayPlan) -> Relays:
    """Start the planned relays and wait until they answer. RelayStartError if they do not."""
    return (ClusterRelays(plan) if plan.cluster else LocalRelay(plan)).start()


SUMMARY_FILE = "trace_relays.json"  # in OUTPUT_DIR: each node's relay at the end of the run, for scripts to read


def say_summaries(summaries: list[NodeSummary], output_dir: str | None = None, out=None) -> None:
    """One line per node on the console; all of it in OUTPUT_DIR/trace_relays.json (written whole or not at all)."""
    for summary in summaries:
        print(f"[traces] {summary.line()}", file=out or sys.stderr, flush=True)
    if output_dir:
        with Folder.open(output_dir, create=True) as folder:  # never through a link planted there
            folder.write(SUMMARY_FILE, json.dumps({"nodes": [asdict(summary) for summary in summaries]}, indent=1))
