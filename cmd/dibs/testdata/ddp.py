"""A small real DDP training loop (gloo, CPU) for dibs's launch tests.

It starts the way a plain env:// program does, from RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (set by dibs, by torchrun or by srun), trains a
tiny model for a few steps on data that differs per rank, and writes what
its replica ended with to OUT/rank<RANK>.json, so a test can check that
every rank finished and all replicas hold identical weights.
"""
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    dist.init_process_group("gloo")  # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights everywhere
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)  # different data per rank
    for _ in range(steps):
        x = torch.randn(32, 16, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP averages the gradients over every rank
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    dist.barrier()
    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
        "node": os.environ.get("DIBS_NODE", ""),
        "weights": digest,
        "loss": float(loss),
    }
    tmp = os.path.join(out, "rank%d.json.tmp" % rank)
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, os.path.join(out, "rank%d.json" % rank))
    print("rank %d of %d done, weights %s" % (rank, world, digest[:12]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
