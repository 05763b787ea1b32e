"""A loop over a DataLoader with two workers that never ends by itself (stopped by --duration)."""
import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.randn(64, 64) @ torch.randn(64, 64)


if __name__ == "__main__":
    model = torch.nn.Linear(64, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in DataLoader(Slow(), batch_size=16, num_workers=2):
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()
