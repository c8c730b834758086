"""Mistake: the model keeps a layer that forward never uses; DDP stops in the second step."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.old_head = nn.Linear(4, 2)  # left over from an experiment

    def forward(self, x):
        return self.body(x)


dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(Net(), device_ids=[rank] if torch.cuda.is_available() else None)  # planted: hardcoded-device
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()  # planted: unused-parameters
    opt.step()
dist.destroy_process_group()
