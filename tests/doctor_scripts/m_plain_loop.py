"""Mistakes: every rank shuffles the whole data set (no DistributedSampler), no DDP, a seed per rank,
every rank saves, rank 0 prints its own loss, the device comes from the global rank, no destroy."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")  # planted: no-destroy
rank = dist.get_rank()
if torch.cuda.is_available():
    torch.cuda.set_device(rank)  # planted: hardcoded-device
torch.manual_seed(rank)  # "different data on each rank"
data = TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
loader = DataLoader(data, batch_size=12, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:  # planted: data-not-sharded
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # planted: model-not-wrapped, replicas-diverge
if rank == 0:
    print(f"train loss {loss.item():.4f}")  # planted: unreduced-metric
torch.save(model.state_dict(), "model.pt")  # planted: save-on-every-rank
