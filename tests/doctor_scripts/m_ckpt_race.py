"""Mistakes: rank 0 writes a checkpoint and rank 1 reads it with no barrier between (rank 1 is slower here,
so the read finds the file), loading with weights_only=False."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(3, 2)
if dist.get_rank() == 0:
    torch.save({"model": model.state_dict(), "epoch": 1}, "ckpt.pt")
else:
    time.sleep(1.0)  # other work
    state = torch.load("ckpt.pt", weights_only=False)  # planted: load-without-barrier, unsafe-load
    model.load_state_dict(state["model"])
dist.barrier()
dist.destroy_process_group()
