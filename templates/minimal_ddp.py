"""The lines every DDP training script needs, and nothing else (notebooks/cheatsheet.md says why each is there).
    torchrun --standalone --nproc-per-node=2 templates/minimal_ddp.py [CHECKPOINT]"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init: its functions then hold no group at exit
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, GLOBAL_BATCH, SEED = 2, 32, 0
path = sys.argv[1] if len(sys.argv) > 1 else "model.pt"
local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun: this process's index on its machine
if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU for every process
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)  # before init and before anything touches CUDA
else:
    device = torch.device("cpu")
dist.init_process_group()  # gloo for CPU tensors, nccl for CUDA ones; RANK, WORLD_SIZE, address: torchrun
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(SEED)
x = torch.randn(512, 8)
data = TensorDataset(x, x.sum(dim=1, keepdim=True))
sampler = DistributedSampler(data, seed=SEED)  # rank r takes every world-th sample of one shuffle
assert GLOBAL_BATCH % world == 0, f"GLOBAL_BATCH={GLOBAL_BATCH} does not split over {world} ranks"
loader = DataLoader(data, batch_size=GLOBAL_BATCH // world, sampler=sampler)  # per-rank batch
model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # after the wrap, from the DDP model
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
        loss.backward()  # DDP averages the gradients over the ranks here
        optimizer.step()
    loss = loss.detach()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # every rank's last-batch loss, averaged
    if rank == 0:
        print(f"epoch {epoch}: loss {loss.item():.4f}")
if rank == 0:  # the replicas are equal: one writer, without DDP's "module." prefix
    torch.save(model.module.state_dict(), path)
dist.barrier()  # no rank reads the file before it is written
model.module.load_state_dict(torch.load(path, map_location=device, weights_only=True))
dist.barrier()  # the clean exit: every rank is done with the group ...
del model  # ... nothing holds it (DDP does) ...
dist.destroy_process_group()  # ... when it is destroyed
