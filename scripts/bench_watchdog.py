"""What the launcher's progress watchdog costs in the CPU smoke, and that it holds no GPU.

One launch of scripts/smoke_cpu.sh (RESUME_CHECK=0: verl's main_ppo, 2 GRPO steps, validations, a checkpoint)
with the watchdog on (the default) and one with it off (STALL_MINUTES=0), one after the other. For each, the
launcher process (`python -m recipes.launch`, where the watchdog lives) is polled from outside every POLL_S: its own
CPU time (not its children's) and its peak resident memory (VmHWM) as last seen before it ended. The watchdog's own
threads (reading main_ppo's output, watching the clock) report their CPU time in the launcher's last `[stall]` line.
The watchdog never imports torch (no CUDA can be initialised by it): checked in a fresh interpreter.

    python scripts/bench_watchdog.py | python scripts/record_measured.py
    python scripts/bench_watchdog.py --quick    # the same two launches of the real launcher, its main_ppo a stand-in
                                                # that prints six step lines (seconds; checks the command, no figures)

Last line: RESULT watchdog_cpu_seconds=<its threads> watchdog_cpu_percent=<of the launch's wall>
launcher_cpu_seconds_on=.. launcher_cpu_seconds_off=.. launcher_peak_rss_mb_on=.. launcher_peak_rss_mb_off=..
watchdog_imports_torch=<0|1>
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from recipes.constants import REPO_ROOT

POLL_S = 0.5


# --quick: the launcher's interpreter, except for main_ppo, which it replaces by a few step lines in verl's format
STAND_IN_MAIN_PPO = """#!/usr/bin/env bash
# a stand-in for verl's main_ppo (bench_watchdog --quick): six step lines, then a clean exit; all else: real Python
if [ "${1:-}" = -m ] && [ "${2:-}" = recipes.trainer.main_ppo ]; then
  for step in 1 2 3 4 5 6; do echo "step:$step - training/global_step:$step"; sleep 0.5; done
  exit 0
fi
exec "%s" "$@"
"""


def launch(work: Path, stall_minutes: str | None, quick: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "PYTHON": sys.executable, "WORK_DIR": str(work), "RESUME_CHECK": "0",
           "WANDB_ERROR_REPORTING": "false", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    command = ["bash", str(REPO_ROOT / "scripts" / "smoke_cpu.sh")]
    if quick is not None:  # the quick mode's interpreter, model and data (_quick_launch)
        env.update(quick, PROFILE="cpu_smoke", TRACE="off", LOGGER="console", OUTPUT_DIR=str(work / "outputs"))
        command = ["bash", "-c", f". {REPO_ROOT}/scripts/cpu_env.sh && exec bash {REPO_ROOT}/scripts/run_gsm8k_grpo.sh"]
    if stall_minutes is not None:
        env["STALL_MINUTES"] = stall_minutes
    log_file = work.parent / f"{work.name}.log"
    seen: dict = {}
    start = time.monotonic()
    with open(log_file, "w") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        while proc.poll() is None:
            _poll_launcher(proc.pid, seen)
            time.sleep(POLL_S)
    wall_s = time.monotonic() - start
    text = log_file.read_text(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{text[-3000:]}")
    wall = re.search(r"launch 'train' took (\d+) s", text)
    watchdog = re.search(r"\[stall\] watchdog: .*watchdog CPU ([\d.]+) s", text)
    return {"cpu_s": seen.get("cpu_s", 0.0), "rss_mb": seen.get("rss_mb", 0.0),
            "wall_s": float(wall.group(1)) if wall else wall_s,
            "watchdog_cpu_s": float(watchdog.group(1)) if watchdog else None}


def _quick_launch(work: Path) -> dict[str, str]:
    """The quick mode's model, data and main_ppo stand-in: the bundled GSM8K sample, the CPU smoke's tiny model."""
    from data_prep import gsm8k
    from data_prep.sources import SAMPLE_DIR
    from harness.qwen_tokenizer import build_tiny_qwen2_model_dir

    work.mkdir(parents=True)
    stand_in = work / "python"
    stand_in.write_text(STAND_IN_MAIN_PPO % sys.executable)
    stand_in.chmod(0o755)
    if gsm8k.main(["--input_dir", str(SAMPLE_DIR), "--local_save_dir", str(work / "data")]) != 0:
        raise RuntimeError("data prep of the bundled GSM8K sample failed")
    build_tiny_qwen2_model_dir(str(work / "model"))
    return {"PYTHON": str(stand_in), "DATA_DIR": str(work / "data"), "MODEL_PATH": str(work / "model")}


def _poll_launcher(sid: int, seen: dict) -> None:
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if os.getsid(proc.pid) != sid or "recipes.launch" not in (proc.info["cmdline"] or []):
                continue
            times = proc.cpu_times()
            seen["cpu_s"] = times.user + times.system
            status = Path(f"/proc/{proc.pid}/status").read_text()
            seen["rss_mb"] = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
        except (ProcessLookupError, PermissionError, psutil.Error, OSError, AttributeError):
            continue


def imports_torch() -> bool:
    probe = "import sys, recipes.watchdog.watch, recipes.watchdog.cluster; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="main_ppo a stand-in: checks the command in seconds")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_watchdog_") as tmp:
        quick = _quick_launch(Path(tmp) / "quick") if args.quick else None
        on = launch(Path(tmp) / "on", None, quick)
        print(f"watchdog on:  {on}", flush=True)
        off = launch(Path(tmp) / "off", "0", quick)
        print(f"watchdog off: {off}", flush=True)
    if on["watchdog_cpu_s"] is None or off["watchdog_cpu_s"] is not None:
        sys.exit("the watchdog's last line was not where expected (on: present, off: absent)")
    share = 100 * on["watchdog_cpu_s"] / on["wall_s"]
    print(f"RESULT watchdog_cpu_seconds={on['watchdog_cpu_s']:.3f} watchdog_cpu_percent={share:.4f} "
          f"launcher_cpu_seconds_on={on['cpu_s']:.2f} launcher_cpu_seconds_off={off['cpu_s']:.2f} "
          f"launcher_peak_rss_mb_on={on['rss_mb']:.0f} launcher_peak_rss_mb_off={off['rss_mb']:.0f} "
          f"watchdog_imports_torch={int(imports_torch())}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
