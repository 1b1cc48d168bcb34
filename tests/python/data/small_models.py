"""Small modules for tests of pipewright-export's cutting rules."""
import torch
import torch.nn as nn


class SeqNet(nn.Module):
    """The forward calls an nn.Sequential: its elements are the nodes, unless --leaf-modules
    names it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def seqnet() -> nn.Module:
    torch.manual_seed(0)
    return SeqNet()


class TwoInputs(nn.Module):
    """Two model inputs; the second is read by glue in front of `b`."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x) * mask)


def two_inputs() -> nn.Module:
    torch.manual_seed(0)
    return TwoInputs()
