"""Benchmark: how long a stop takes, signal to exit, so that `#SBATCH --signal=B:USR1@<s>` can be sized.

    python scripts/bench_preempt.py | python scripts/record_measured.py                # one CPU run, stopped mid-step
    python scripts/bench_preempt.py --projection-only | python scripts/record_measured.py  # the 8xH100 projection

The CPU run: the CPU smoke's model and rows through scripts/run_gsm8k_grpo.sh (PROFILE=cpu_smoke, 3 steps,
save_freq 3, no validation), SIGTERM to the launcher as soon as step 1's metrics line is printed (step 2 has just
begun): the time from the signal to the launcher's exit is the rest of step 2, its checkpoint, the trainer's end,
Ray's shutdown and the relays' drain. RESULT preempt_cpu_signal_to_exit_seconds, and the step time for scale.

The 8xH100 projection (no GPU run of the full recipe exists yet: estimated, with every assumption printed): the
worst case is a signal just after a step began. A whole step (the upper end of docs/configuration.md's estimate) plus
its validation on test_freq steps, then the checkpoint of Qwen2.5-3B as verl writes it with FSDP (fp32 parameter
shards and Adam's two fp32 moments, 12 bytes a parameter; the dataloader state and the rest are negligible) at an
assumed write bandwidth of the shared storage, then the end (the trainer, Ray, the relays; assumed). Change the
constants below to your storage and step time. RESULT preempt_8xh100_projection_seconds.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

STEP_S = 90  # docs/configuration.md#step-time-on-8xh100-estimate: 60-90 s a step; the upper end
VALIDATION_S = 40  # a test_freq step validates too: 1,319 prompts x 1 rollout, about a step's rollout plus its tail
PARAMS = 3.09e9  # Qwen2.5-3B
CHECKPOINT_BYTES_PER_PARAM = 12  # fp32 parameters + Adam's exp_avg and exp_avg_sq, fp32 (docs/configuration.md)
STORAGE_GB_PER_S = 1.0  # shared storage (NFS, Lustre client) write bandwidth assumed for the 8 ranks together
END_S = 30  # the trainer's end, Ray's shutdown, the relays' drain on a GPU node (SGLang engines to stop)


def projection() -> tuple[float, list[str]]:
    checkpoint_gb = PARAMS * CHECKPOINT_BYTES_PER_PARAM / 1e9
    checkpoint_s = checkpoint_gb / STORAGE_GB_PER_S
    total = STEP_S + VALIDATION_S + checkpoint_s + END_S
    lines = [f"a whole step (estimate, upper end): {STEP_S} s",
             f"its validation (a test_freq step): {VALIDATION_S} s",
             f"the checkpoint: {PARAMS / 1e9:.2f}B params x {CHECKPOINT_BYTES_PER_PARAM} B = {checkpoint_gb:.1f} GB "
             f"at {STORAGE_GB_PER_S:g} GB/s = {checkpoint_s:.0f} s",
             f"the end (trainer, Ray, relays): {END_S} s",
             f"total: {total:.0f} s; --signal=B:USR1@<s> with room to spare: {2 * total:.0f} s"]
    return total, lines


def cpu_run(work: Path) -> dict:
    from harness import cpu_run as run
    from recipes.constants import SHARED_DIR

    source = SHARED_DIR / "data" / "gsm8k"
    if not (source / "train.jsonl").is_file():
        from data_prep.sources import SAMPLE_DIR as source
    model, data = run.prepare(work, Path(source))
    env = run.environment(model, data, work / "outputs")
    log = work / "launch.log"
    proc = run.start(env, log, "trainer.total_training_steps=3", "trainer.save_freq=3", "trainer.test_freq=-1",
                     "trainer.val_before_train=false")
    try:
        run.wait_for(log, r"\bstep:1 - ", proc, 1800)
        os.kill(proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        status = proc.wait(timeout=1800)
        took = time.monotonic() - signalled
    finally:
        run.kill_session(proc.pid)
    text = log.read_text(errors="replace")
    steps = [float(s) for s in re.findall(r"timing_s/step:([\d.]+)", text)]
    return {"status": status, "signal_to_exit_s": took, "step_s": steps[0] if steps else float("nan"),
            "saved_line": next((line for line in text.splitlines() if line.startswith("[launch] stopped")), "")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--projection-only", "--quick", action="store_true",
                   help="the 8xH100 projection, no CPU run (the CPU run takes minutes)")
    args = p.parse_args(argv)
    total, lines = projection()
    print("\n".join(f"8xH100 projection: {line}" for line in lines), flush=True)
    if args.projection_only:
        print(f"RESULT preempt_8xh100_projection_seconds={total:.0f}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_preempt_") as tmp:
        result = cpu_run(Path(tmp))
    print(f"CPU run: exit {result['status']}; {result['saved_line']}", flush=True)
    if result["status"] != 75:
        sys.exit(f"the stopped launch exited {result['status']}, not 75: no figure")
    print(f"RESULT preempt_cpu_signal_to_exit_seconds={result['signal_to_exit_s']:.1f} "
          f"preempt_cpu_step_seconds={result['step_s']:.1f} preempt_8xh100_projection_seconds={total:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
