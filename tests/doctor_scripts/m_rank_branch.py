"""Mistake: the loss is averaged over the ranks inside `if rank == 0:`; rank 1 never joins."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
loss = torch.tensor([1.0 + rank])
if rank == 0:
    dist.all_reduce(loss)  # planted: rank-conditional-collective
    print(f"mean loss {loss.item() / 2}")
dist.destroy_process_group()
