"""Mistakes: 9 test samples on 2 ranks through a DistributedSampler (padded to 10) summed into the
accuracy, and a training sampler that never gets set_epoch."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
train = TensorDataset(torch.randn(24, 4), torch.randint(0, 2, (24,)))
test = TensorDataset(torch.randn(9, 4), torch.randint(0, 2, (9,)))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(train, shuffle=True, seed=1)
loader = DataLoader(train, batch_size=4, sampler=sampler)
for epoch in range(2):  # noqa: B007  the epoch never reaches the sampler
    for x, y in loader:  # planted: sampler-epoch-not-set
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

model.eval()
correct, seen = torch.zeros(1), torch.zeros(1)
with torch.no_grad():
    for x, y in DataLoader(test, batch_size=4, sampler=DistributedSampler(test, shuffle=False)):  # planted: eval-duplicates
        correct += (model(x).argmax(1) == y).sum()
        seen += len(y)
totals = torch.cat([correct, seen])
dist.all_reduce(totals)
if dist.get_rank() == 0:
    print(f"accuracy {totals[0].item() / totals[1].item():.3f} on {int(totals[1].item())} samples")
del model
dist.destroy_process_group()
