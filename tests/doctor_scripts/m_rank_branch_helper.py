"""Mistake: a helper with a barrier inside is called on rank 0 only; rank 1 goes on to the next
collective, a different one."""
import os

import torch
import torch.distributed as dist


def save_checkpoint(step):
    with open(f"step{step}.txt", "w") as f:
        f.write("done")
    dist.barrier()  # planted: rank-conditional-collective


def main():
    dist.init_process_group("gloo")
    is_main = int(os.environ["RANK"]) == 0
    grads = torch.ones(4)
    for step in range(2):
        dist.all_reduce(grads)
        if is_main:
            save_checkpoint(step)
    dist.destroy_process_group()


main()
