"""A model folder of random weights in a published model's shape (shapes.py), with a tokenizer: what the probe runs
where the weights themselves are not at hand. Random weights cost a step exactly what trained ones do (the same
shapes, the same kernels); their text is noise, which the probe makes run to the length limit anyway.

Each tensor is drawn as the model's own initializer would (normal, std initializer_range; norms 1, biases 0) on the
GPU when there is one (seconds for 3B), saved as one safetensors file, the folder written beside its target and
renamed into place when whole.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt")


def write(config: dict, tokenizer_dir: Path, out_dir: Path, seed: int = 0) -> dict:
    """out_dir made anew: config.json, generation_config.json (token ids only: no sampling defaults), the tokenizer's
    files and model.safetensors. Returns {"parameters", "bytes", "seconds", "device"}."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    start = time.monotonic()
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[config["torch_dtype"]]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in Qwen2ForCausalLM(Qwen2Config(**config)).named_parameters()}
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=dtype, device=device)
        elif name.endswith(".bias"):
            tensor = torch.zeros(shape, dtype=dtype, device=device)
        else:
            tensor = torch.empty(shape, dtype=dtype, device=device).normal_(0.0, config["initializer_range"],
                                                                            generator=generator)
        tensors[name] = tensor.cpu()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2))
        copied = [name for name in TOKENIZER_FILES if (tokenizer_dir / name).is_file()]
        if "tokenizer.json" not in copied:
            raise FileNotFoundError(f"{tokenizer_dir} has no tokenizer.json: not a tokenizer folder")
        for name in copied:
            shutil.copy2(tokenizer_dir / name, tmp / name)
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"parameters": sum(t.numel() for t in tensors.values()), "device": device,
            "bytes": (out_dir / "model.safetensors").stat().st_size, "seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.probe.random_model --shape qwen2.5-3b --tokenizer_dir T --out_dir M`: in a process of
    its own, so that the GPU memory it used is freed before the step starts."""
    import argparse

    from harness.probe.shapes import SHAPES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--tokenizer_dir", required=True, type=Path)
    p.add_argument("--out_dir", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(json.dumps(write(SHAPES[args.shape], args.tokenizer_dir, args.out_dir, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
