"""Mistakes: an IterableDataset that yields every item on every rank, and a model trained without DDP."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            yield torch.randn(3, generator=g), torch.randn(1, generator=g)


dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Stream(24), batch_size=6):  # planted: data-not-sharded
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()  # planted: model-not-wrapped
dist.barrier()
dist.destroy_process_group()
