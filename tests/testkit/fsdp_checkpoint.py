"""A real verl FSDP2 actor checkpoint, as a training run saves it, without a training run: two gloo ranks shard a
tiny fp32 Qwen2 with torch's `fully_shard` and verl's own `FSDPCheckpointManager` writes
`<dir>/model_world_size_2_rank_{0,1}.pt`, `fsdp_config.json` and `huggingface/`. The full unsharded weights go
to `<dir>/../reference_weights.pt` for tests to compare an export against.

    python -m testkit.fsdp_checkpoint <actor_dir>      # ~10 s on 2 cores (two processes importing verl)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

WORLD_SIZE = 2


def _rank(rank: int, actor_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE),
                      LOCAL_RANK=str(rank))
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    from harness.qwen_tokenizer import FIRST_ADDED_ID, VOCAB_SIZE, load_qwen25_tokenizer

    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(0)  # both ranks build the same model; each keeps its half of every parameter
    config = Qwen2Config(vocab_size=VOCAB_SIZE, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                         bos_token_id=FIRST_ADDED_ID, eos_token_id=FIRST_ADDED_ID + 2, dtype="float32",
                         architectures=["Qwen2ForCausalLM"])
    model = Qwen2ForCausalLM(config).to(torch.float32)
    with torch.no_grad():  # values bf16 cannot hold: an export that rounds them differs from the checkpoint
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 1e-3)
    if rank == 0:
        reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        torch.save(reference, Path(actor_dir).parent / "reference_weights.pt")
    mesh = init_device_mesh("cpu", (WORLD_SIZE,), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    manager = FSDPCheckpointManager(model, processing_class=load_qwen25_tokenizer(),
                                    checkpoint_config={"save_contents": ["model"], "load_contents": ["model"]})
    manager.save_checkpoint(actor_dir)
    dist.destroy_process_group()


def write_fsdp_checkpoint(actor_dir: str | os.PathLike) -> Path:
    import socket

    import torch.multiprocessing as mp

    from harness.qwen_tokenizer import load_qwen25_tokenizer

    load_qwen25_tokenizer()  # built once here (cached), before the two ranks would both build it
    with socket.socket() as s:  # a free loopback port for the two ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Path(actor_dir).mkdir(parents=True, exist_ok=True)
    mp.start_processes(_rank, args=(str(actor_dir), port), nprocs=WORLD_SIZE, join=True, start_method="spawn")
    return Path(actor_dir)


if __name__ == "__main__":
    write_fsdp_checkpoint(sys.argv[1])
