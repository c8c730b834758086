"""Exercise 4's starting point: a single-process classifier, to be turned into a DDP script."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, GLOBAL_BATCH, SEED = 4, 24, 0
out = Path(sys.argv[1])


def make_data():  # 192 points in 8 dimensions, 3 classes: the same on every run
    x = torch.randn(192, 8, generator=torch.Generator().manual_seed(SEED))
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def main():
    torch.manual_seed(SEED)
    data = make_data()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=GLOBAL_BATCH, shuffle=True)
    for epoch in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "model.pt")


if __name__ == "__main__":
    main()
