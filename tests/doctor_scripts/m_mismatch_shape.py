"""Mistake: each rank all-reduces a tensor whose length depends on its own data."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
counts = torch.ones(3 + dist.get_rank())
dist.all_reduce(counts)  # planted: collective-mismatch
dist.destroy_process_group()
