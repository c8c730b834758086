"""Clean: an IterableDataset that shards by rank (and by DataLoader worker), a plain training loop with DDP."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        step = dist.get_world_size() * workers
        start = dist.get_rank() * workers + worker_id
        g = torch.Generator().manual_seed(0)
        items = [(torch.randn(3, generator=g), torch.randn(1, generator=g)) for _ in range(self.n)]
        yield from items[start::step]


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Shards(24), batch_size=4):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
dist.barrier()
model = None
dist.destroy_process_group()
