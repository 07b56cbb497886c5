"""Launched by tests/test_ddp.py under torchrun (2 CPU processes, gloo): a few DDP steps of the tiny model,
then each rank saves its parameters and its result's loss curve to OUT/rank<r>.pt."""
import os
import sys

import torch

import lib.book.setup  # noqa: F401
from lib.training.train import TrainConfig, train

CFG = dict(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=8, steps=4, lr=3e-3, warmup=2, attn="naive",
           telemetry_every=2, eval_batches=0, progress=False)

if __name__ == "__main__":
    out = sys.argv[1]
    res = train(TrainConfig(**CFG))
    rank = int(os.environ["RANK"])
    torch.save(dict(params=[p.detach().clone() for p in res["model"].parameters()], loss=res["loss"],
                    world_size=res["world_size"], telemetry_steps=res["telemetry"].get("step", [])),
               os.path.join(out, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()
