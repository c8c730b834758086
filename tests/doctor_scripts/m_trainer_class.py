"""Mistakes, in a Trainer class: device from RANK, no set_epoch, every rank saves, the resume loads with
weights_only=False, rank 0 prints its own shard's accuracy, the group is never destroyed."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.gpu_id = int(os.environ["RANK"])
        self.device = torch.device(f"cuda:{self.gpu_id}") if torch.cuda.is_available() else torch.device("cpu")  # planted: hardcoded-device
        self.model = DDP(model.to(self.device))
        self.train_data = train_data
        self.optimizer = optimizer

    def _run_epoch(self, epoch):
        for source, targets in self.train_data:  # planted: sampler-epoch-not-set
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(source), targets)
            loss.backward()
            self.optimizer.step()

    def _save_checkpoint(self):
        torch.save(self.model.module.state_dict(), "checkpoint.pt")  # planted: save-on-every-rank

    def accuracy(self, data):
        correct = total = 0
        with torch.no_grad():
            for source, targets in data:
                correct += (self.model(source).argmax(1) == targets).sum().item()
                total += len(targets)
        return correct / total

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
        self._save_checkpoint()


def main():
    dist.init_process_group("gloo")  # planted: no-destroy
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,)))
    loader = DataLoader(dataset, batch_size=5, sampler=DistributedSampler(dataset))
    model = torch.nn.Linear(6, 3)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
    trainer.train(2)
    dist.barrier()
    trainer.model.module.load_state_dict(torch.load("checkpoint.pt", weights_only=False))  # planted: unsafe-load
    acc = trainer.accuracy(loader)
    if dist.get_rank() == 0:
        print(f"accuracy {acc:.3f}")  # planted: unreduced-metric


if __name__ == "__main__":
    main()
