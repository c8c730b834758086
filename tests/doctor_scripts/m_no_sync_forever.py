"""Mistakes: every backward runs under no_sync (the gradients are never averaged), and the ranks read
rank 0's file as soon as it appears."""
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group(backend="gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 5), torch.randn(32, 1))
    sampler = DistributedSampler(data, shuffle=False)
    model = DistributedDataParallel(torch.nn.Linear(5, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for x, y in DataLoader(data, batch_size=4, sampler=sampler):
        with model.no_sync():
            torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()  # planted: replicas-diverge
        opt.zero_grad()
    dist.barrier()
    if int(os.environ["RANK"]) == 0:
        torch.save(model.module.state_dict(), "final.pt")
    while not os.path.exists("final.pt"):  # wait for rank 0's file
        time.sleep(0.01)
    model.module.load_state_dict(torch.load("final.pt", weights_only=True))  # planted: load-without-barrier
    dist.barrier()
    del model
    dist.destroy_process_group()


main()
