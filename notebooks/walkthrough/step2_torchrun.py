"""Step 2: torchrun starts N copies of the script, which join one process group."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # clean exit: imported before the group exists, it never holds it
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler

from ddp_helpers.data import toy_regression
from ddp_helpers.models import ToyModel

EPOCHS, GLOBAL_BATCH, SEED = 3, 32, 0
out = Path(sys.argv[1])


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dist.init_process_group()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by torchrun
    torch.manual_seed(SEED)
    data = toy_regression(n=256)
    model = ToyModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    order = torch.Generator()  # the shuffle's own generator
    loader = DataLoader(data, batch_size=GLOBAL_BATCH, sampler=RandomSampler(data, generator=order))
    for epoch in range(EPOCHS):
        order.manual_seed(SEED + epoch)  # this epoch's order depends on SEED + epoch only
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
