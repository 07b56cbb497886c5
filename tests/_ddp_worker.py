"""Launched by tests/test_ddp.py under torchrun (2 CPU processes, gloo): a few DDP steps of the tiny model with the
old harness (`train`) and with the new loop (`train_lm`, in micro-batches: gradient accumulation), then each rank
saves its parameters and its results' loss curves to OUT/rank<r>.pt."""
import os
import sys

import torch

import lib.book.setup  # noqa: F401
from lib.training.train import TrainConfig, train

CFG = dict(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=8, steps=4, lr=3e-3, warmup=2, attn="naive",
           telemetry_every=2, eval_batches=0, progress=False)
# train_lm: 8 windows a step, each of 2 ranks 4 of them as 2 micro-batches of 2; the census every 2 steps (rank 0)
LM_MODEL = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, attn="naive")
LM_RUN = dict(steps=5, batch_size=8, micro_batch=2, lr=3e-3, warmup=2, census_every=2, census_rows=2,
              eval_every=3, eval_batches=1)


def lm_config(**change):
    from lib.training.model import GPTConfig
    from lib.training.loop import RunConfig
    return RunConfig(model=GPTConfig(**LM_MODEL), **(LM_RUN | change))


if __name__ == "__main__":
    from lib.training.loop import train_lm
    out = sys.argv[1]
    res = train(TrainConfig.flat(**CFG))
    lm = train_lm(lm_config())
    rank = int(os.environ["RANK"])
    torch.save(dict(params=[p.detach().clone() for p in res["model"].parameters()], loss=res["loss"],
                    world_size=res["world_size"], telemetry_steps=res["telemetry"].get("step", []),
                    lm_params=[p.detach().clone() for p in lm["model"].parameters()], lm_loss=lm["loss"],
                    lm_grad_norm=lm["grad_norm"], lm_val=lm["val"], lm_accum=lm.get("grad_accum"),
                    lm_census_steps=lm["census"]["step"]),
               os.path.join(out, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()
