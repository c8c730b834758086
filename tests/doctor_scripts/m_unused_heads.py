"""Mistake: a two-headed model whose loss uses one head only."""
import torch
import torch.distributed as dist
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 8)
        self.classify = nn.Linear(8, 2)
        self.regress = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.trunk(x))
        return self.classify(h), self.regress(h)


def train():
    dist.init_process_group("gloo")
    net = nn.parallel.DistributedDataParallel(TwoHeads())
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for _ in range(3):
        logits, _ = net(torch.randn(4, 3))  # planted: unused-parameters
        loss = nn.functional.cross_entropy(logits, torch.tensor([0, 1, 0, 1]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    del net
    dist.destroy_process_group()


train()
