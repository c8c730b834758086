"""Mistake: every rank evaluates the whole validation set, then the sums are all-reduced: every sample
counts twice."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


@torch.no_grad()
def evaluate(model, loader):
    sums = torch.zeros(2)
    for x, y in loader:  # planted: eval-duplicates
        sums += torch.tensor([torch.nn.functional.mse_loss(model(x), y, reduction="sum").item(), len(y)])
    dist.all_reduce(sums)
    return (sums[0] / sums[1]).item()


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(2, 1))
    val = DataLoader(TensorDataset(torch.randn(10, 2), torch.randn(10, 1)), batch_size=5)
    loss = evaluate(model, val)
    if dist.get_rank() == 0:
        print(f"val loss {loss:.3f}")
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
