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


class _Unscriptable(nn.Module):
    """**kwargs: torch.jit.script refuses it, so the node is traced."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.25)

    def forward(self, x, **kwargs):
        return self.drop(self.bn(self.lin(x)))


class TracedBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = _Unscriptable()
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(nn.functional.dropout(self.a(x), 0.5))


def traced_batchnorm() -> nn.Module:
    torch.manual_seed(0)
    return TracedBatchNorm()


class Reused(nn.Module):
    """`block` is called twice and the parameter `scale` is read by glue in front of two
    nodes: the same parameter under the same name in several nodes (tied_to its own name)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Linear(8, 8)
        self.block = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(self.emb(x) * self.scale)
        h = self.block(torch.tanh(h))
        return self.head(h * self.scale)


def reused() -> nn.Module:
    torch.manual_seed(0)
    return Reused()
