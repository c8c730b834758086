"""Mistake: the ranks reduce their metrics in their own dictionary order, so the n-th collective differs."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
metrics = {"loss": torch.zeros(1), "per_class": torch.zeros(5)}
names = sorted(metrics, reverse=dist.get_rank() == 1)
for name in names:
    dist.all_reduce(metrics[name])  # planted: collective-mismatch
dist.barrier()
dist.destroy_process_group()
