"""Clean: a Trainer class in the style of the multi-GPU DDP tutorials (LOCAL_RANK device, DistributedSampler
with set_epoch, rank 0 saves, the loss all-reduced before it is printed)."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.device = torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
        self.model = DDP(model.to(self.device), device_ids=[self.local_rank] if torch.cuda.is_available() else None)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source.to(self.device)), targets.to(self.device))
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        total = torch.zeros(2, device=self.device)
        for source, targets in self.train_data:
            total += torch.stack([self._run_batch(source, targets) * len(targets), torch.tensor(float(len(targets)))])
        dist.all_reduce(total)
        if self.global_rank == 0:
            print(f"epoch {epoch} | mean loss {(total[0] / total[1]).item():.4f}")

    def _save_checkpoint(self, epoch):
        torch.save(self.model.module.state_dict(), "checkpoint.pt")
        print(f"epoch {epoch} | checkpoint saved")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_checkpoint(epoch)
            dist.barrier()


def main(total_epochs=2, save_every=1):
    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,)))
    loader = DataLoader(dataset, batch_size=5, shuffle=False, sampler=DistributedSampler(dataset))
    model = torch.nn.Linear(6, 3)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), save_every)
    trainer.train(total_epochs)
    state = torch.load("checkpoint.pt", map_location=trainer.device, weights_only=True)
    trainer.model.module.load_state_dict(state)
    del trainer
    destroy_process_group()


if __name__ == "__main__":
    main()
