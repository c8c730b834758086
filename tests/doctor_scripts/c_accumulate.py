"""Clean: random_split, no_sync accumulation over 2 micro-batches, SyncBatchNorm only on GPUs (it has no CPU
forward), exact evaluation of every test sample once, metrics summed with all_reduce."""
import contextlib
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset, random_split

ACCUMULATE = 2


def evaluate(model, dataset, rank, world):
    model.eval()
    sums = torch.zeros(2)
    with torch.no_grad():
        for x, y in DataLoader(Subset(dataset, range(rank, len(dataset), world)), batch_size=4):
            sums += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)], dtype=torch.float32)
    dist.all_reduce(sums)
    model.train()
    return sums[0] / sums[1], int(sums[1])


def main():
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    full = TensorDataset(torch.randn(41, 5, generator=torch.Generator().manual_seed(0)), torch.arange(41) % 2)
    train, test = random_split(full, [32, 9], generator=torch.Generator().manual_seed(0))
    sampler = DistributedSampler(train, seed=0)
    loader = DataLoader(train, batch_size=4, sampler=sampler)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    if device.type == "cuda":
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = DDP(net.to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % ACCUMULATE == 0
            with contextlib.nullcontext() if last else model.no_sync():
                (nn.functional.cross_entropy(model(x.to(device)), y.to(device)) / ACCUMULATE).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    accuracy, count = evaluate(model.module, test, rank, world)
    if rank == 0:
        print(f"test accuracy {accuracy.item():.3f} on {count} samples")
    dist.barrier()
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
