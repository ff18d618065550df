"""What a run's traces weigh and the TRACE_GB_PER_DAY budget (recipes/tracing/volume.py, recipes/preflight/
trace_budget.py): the projection against hand arithmetic on the recipe's composed config, the budget's groups, its
clamp and refusals (one line each), the workers' turns, and the launcher's dry run with the knob set."""

from __future__ import annotations

import math
import re

import pytest
from omegaconf import OmegaConf

from recipes.config_view import ConfigView
from recipes.constants import REPO_ROOT
from recipes.launch.knobs import KnobError, Knobs
from recipes.preflight.checks import check_tracing
from recipes.preflight.findings import Report
from recipes.preflight.trace_budget import PER_WORKER_KEY, budget_overrides
from recipes.tracing import volume as v
from testkit.launcher import plan

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def recipe(default_dry_run):
    """The 8xH100 config a default launch composes, and its trace shape."""
    config = default_dry_run.launch.config
    return config, v.TraceShape.of(config)


def test_the_bytes_per_trajectory_are_the_measured_ones():
    page = (REPO_ROOT / "docs" / "measured.md").read_text()
    row = re.search(r'<a id="trace_bytes_per_trajectory"></a>`trace_bytes_per_trajectory` \| (\d+) \|', page)
    assert row, "docs/measured.md has no trace_bytes_per_trajectory row (scripts/bench_rollout.py records it)"
    assert v.TRACE_BYTES_PER_TRAJECTORY == int(row.group(1))


def test_the_projection_of_the_recipes_own_rate(recipe):
    _, shape = recipe
    assert (shape.prompts, shape.n, shape.workers, shape.per_worker, shape.groups) == (256, 16, 16, 1, None)
    groups = shape.groups_per_step()
    assert groups == 16  # 1 prompt on each of 16 workers
    projected = v.volume(shape, groups)
    traced = 16 * 16 + 16 * shape.val_n / shape.test_freq  # a validation every test_freq steps, averaged
    assert projected.mb_per_step == pytest.approx(traced * v.TRACE_BYTES_PER_TRAJECTORY / 1e6)
    assert shape.step_s == 60  # the short end of the recipe's step time (config/gsm8k_multiturn_grpo.yaml recipe)
    assert projected.gb_per_day == pytest.approx(projected.mb_per_step * 86_400 / shape.step_s / 1e3)
    line = v.describe(shape)
    assert line.startswith("weave, 16 GRPO group(s) a step (1 prompt(s) on each of the 16 agent-loop workers, all 16 "
                           "rollouts, one Weave thread each) = 256 traced trajectories; ")
    free = v.FREE_PLAN_GB_PER_MONTH / v.DAYS_PER_MONTH
    assert f"~{projected.gb_per_day:.2f} GB a day at 60 s a step" in line
    assert line.endswith(f"(~{1e3 * free:.0f} MB a day): {projected.gb_per_day / free:.0f}x that")


def test_a_budget_buys_whole_groups_at_least_one(recipe):
    _, shape = recipe
    one = v.volume(shape, 1).gb_per_day
    assert v.budget_groups(shape, 4.5 * one) == (4, None)
    groups, note = v.budget_groups(shape, one / 10)
    assert groups == 1 and note == (f"TRACE_GB_PER_DAY={one / 10:g} is below one GRPO group a step (~{one:.2f} GB a "
                                    "day at 60 s a step): tracing 1 group a step (clamped); TRACE=off traces nothing")
    assert v.budget_groups(shape, 1e6)[0] == shape.prompts
    for refused in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(v.TraceBudgetError, match="must be a positive number of GB a day; TRACE=off"):
            v.budget_groups(shape, refused)


@pytest.mark.parametrize("groups, workers", [(1, 16), (5, 16), (16, 16), (20, 16), (3, 2)])
def test_the_workers_share_a_steps_groups_in_turn(groups, workers):
    seen = set()
    for step in range(2 * workers):
        shares = [v.groups_on_worker(slot, workers, groups, step) for slot in range(workers)]
        assert sum(shares) == groups and set(shares) <= {groups // workers, groups // workers + 1}, shares
        seen |= {slot for slot, share in enumerate(shares) if share}
    assert seen == set(range(workers))  # every worker's prompts get their turn


def test_the_launcher_turns_a_budget_into_verls_knob_and_the_recipes_and_refuses_what_it_cannot_apply(recipe):
    config, shape = recipe
    one = v.volume(shape, 1).gb_per_day
    view = ConfigView.of(config)
    assert budget_overrides(view, 3 * one, []) == ([f"{PER_WORKER_KEY}=1", f"++{v.GROUPS_KEY}=3"], None)
    assert budget_overrides(view, 40 * one, [])[0] == [f"{PER_WORKER_KEY}=3", f"++{v.GROUPS_KEY}=40"]
    with pytest.raises(v.TraceBudgetError, match=r"^TRACE_GB_PER_DAY=1 and actor_rollout_ref.rollout.trace."
                                                 r"max_samples_per_step_per_worker=2 both set how much is traced"):
        budget_overrides(view, 1.0, [f"{PER_WORKER_KEY}=2"])
    off = OmegaConf.merge(config, {"actor_rollout_ref": {"rollout": {"trace": {"backend": None}}}})
    with pytest.raises(v.TraceBudgetError, match="this run traces nothing"):
        budget_overrides(ConfigView.of(off), 1.0, [])
    for value in ("abc", "0", "-2"):
        with pytest.raises(KnobError, match="TRACE_GB_PER_DAY"):
            Knobs(trace_gb_per_day=value).check({})


def test_a_traced_run_whose_workers_would_split_groups_is_refused(recipe):
    config, _ = recipe
    split = OmegaConf.merge(config, {"actor_rollout_ref": {"rollout": {"agent": {"num_workers": 12}}}})
    report = Report()
    check_tracing(split, report)
    assert report.errors == ["data.train_batch_size=256 is not a multiple of actor_rollout_ref.rollout.agent."
                             "num_workers=12: verl would split GRPO groups across agent-loop workers and trace parts "
                             "of groups; use actor_rollout_ref.rollout.agent.num_workers=8"]
    with pytest.raises(v.TraceBudgetError, match="use actor_rollout_ref.rollout.agent.num_workers=8"):
        budget_overrides(ConfigView.of(split), 1.0, [])
    check_tracing(config, whole := Report())
    assert whole.errors == []


def test_a_dry_run_with_a_budget_plans_it_and_says_when_it_clamps(prepared_data_dir):
    planned = plan(prepared_data_dir, DRY_RUN="1", TRACE_GB_PER_DAY="0.01")
    assert planned.preflight.ok, planned.err
    assert "[traces] TRACE_GB_PER_DAY=0.01 is below one GRPO group a step" in planned.err
    assert planned.overrides[PER_WORKER_KEY] == "1" and planned.overrides[v.GROUPS_KEY] == "1"
    assert OmegaConf.select(planned.launch.config, v.GROUPS_KEY) == 1  # the plan and the written config say so
    assert planned.row("tracing").startswith(
        "weave, 1 GRPO group(s) a step (1 prompt on 1 of the 16 agent-loop workers, in turn, all 16 rollouts")
    refused = plan(prepared_data_dir, DRY_RUN="1", TRACE_GB_PER_DAY="1", PROFILE="1gpu_smoke")  # it traces nothing
    assert not refused.preflight.ok and "[preflight] ERROR: TRACE_GB_PER_DAY=1 but this run traces nothing" \
        in refused.err and "[preflight] ok" not in refused.err
