"""Every benchmark in scripts/ runs: its --quick mode (seconds; the same code path as a measurement, on less work)
exits 0 and ends with its `RESULT name=value ...` line, the names the ones docs/measured.md records. A signature
change that breaks a documented bench command fails here, not on a user's machine. The numbers of a quick run are
not figures (nothing is timed or compared here). bench_rollout's quick shape is tests/test_bench_rollout.py's."""

import os
import re
import subprocess
import sys

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.bench

RESULT = re.compile(r"^RESULT(?: \w+=[-0-9.,]+)+$")
# bench -> the names its RESULT line gives, in order
NAMES = {
    "bench_calculator.py": ["calculator_p99_ms", "calculator_median_ms"],
    "bench_data_prep.py": ["data_prep_seconds"],
    "bench_trace.py": ["trace_ms_per_call", "untraced_ms_per_call", "verl_default_ms_per_call"],
    "bench_reward_workers.py": ["reward_workers", "reward_workers_rss_mb", "reward_workers_pss_mb",
                                "reward_workers_start_s"],
    "bench_dataloader.py": ["dataloader_first_batch_ms_workers0", "dataloader_val_pass_ms_workers0",
                            "dataloader_batch_ms", "dataloader_first_batch_ms_workers8",
                            "dataloader_val_pass_ms_workers8"],
    "bench_watchdog.py": ["watchdog_cpu_seconds", "watchdog_cpu_percent", "launcher_cpu_seconds_on",
                          "launcher_cpu_seconds_off", "launcher_peak_rss_mb_on", "launcher_peak_rss_mb_off",
                          "watchdog_imports_torch"],
    "bench_preempt.py": ["preempt_8xh100_projection_seconds"],
    "bench_relay.py": ["relay_writes_per_s", "relay_write_mb_per_s", "relay_connect_writes_per_s"],
    "bench_ci.py": ["ci_minutes", "ci_install_minutes", "ci_pytest_minutes", "ci_e2e_minutes", "tests_passed"],
}


def test_every_bench_script_has_a_quick_run_here_or_its_own_test():
    benches = {p.name for p in (REPO_ROOT / "scripts").glob("bench_*.py")}
    assert benches == {*NAMES, "bench_rollout.py"}
    assert "--quick" in (REPO_ROOT / "tests" / "test_bench_rollout.py").read_text()


@pytest.mark.parametrize("bench", sorted(NAMES))
def test_the_quick_mode_runs_and_ends_with_its_result_line(bench, tmp_path):
    import record_measured as measured

    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / bench), "--quick"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert RESULT.match(last), last
    names = [pair.split("=", 1)[0] for pair in last.split()[1:]]
    assert names == NAMES[bench]
    recorded = {figure.name for figure in measured.read_page(measured.PAGE)}
    assert set(names) <= recorded, f"{bench}: RESULT names not on docs/measured.md: {set(names) - recorded}"
