"""Step 7: the per-rank batch is the global batch divided by the number of ranks."""
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # clean exit: imported before the group exists, it never holds it
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers.data import toy_regression
from ddp_helpers.models import ToyModel

EPOCHS, GLOBAL_BATCH, SEED = 3, 32, 0
out = Path(sys.argv[1])


def main():
    local_rank = int(os.environ["LOCAL_RANK"])  # this process's index on this machine
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU per process
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before anything touches CUDA
    else:
        device = torch.device("cpu")
    dist.init_process_group()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by torchrun
    torch.manual_seed(SEED)
    data = toy_regression(n=256)
    model = DDP(ToyModel().to(device))  # also copies rank 0's weights to every rank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sampler = DistributedSampler(data, seed=SEED)  # one shuffle, rank r takes every r-th sample of it
    if GLOBAL_BATCH % dist.get_world_size():
        raise ValueError(f"GLOBAL_BATCH={GLOBAL_BATCH} does not split over {dist.get_world_size()} ranks")
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // dist.get_world_size(), sampler=sampler)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # this epoch's order from SEED + epoch, as in step 1
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "model.pt")
    dist.barrier()  # clean exit: every rank is done (its files written) before any rank ends the group
    del model  # nothing may hold the group when it is destroyed (from step 6 on, the DDP model does)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
