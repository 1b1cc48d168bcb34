"""Modules pipewright-export must refuse, with one line naming what is wrong
(tests/python/test_export.py)."""
import torch
import torch.nn as nn


class DataDependent(nn.Module):
    """The top-level forward branches on a tensor's value: torch.fx cannot capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.sum() > 0:
            h = -h
        return self.b(h)


def data_dependent() -> nn.Module:
    torch.manual_seed(0)
    return DataDependent()


class Gate(nn.Module):
    """Not scriptable (**kwargs) and branching on a value: tracing would freeze one branch."""

    def forward(self, x, **kwargs):
        if x.mean() > 0:
            return x * 2.0
        return x


class UntraceableChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.gate = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(self.a(x))


def untraceable_child() -> nn.Module:
    return UntraceableChild()


class ScriptableGate(nn.Module):
    """Branches on a value but is scriptable: one opaque node, compiled with TorchScript."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.mean() > 0):
            return x * 2.0
        return x


class ScriptableBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.gate = ScriptableGate()
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.gate(self.a(x)))


def scriptable_branch() -> nn.Module:
    torch.manual_seed(0)
    return ScriptableBranch()


def raises() -> nn.Module:
    raise ValueError("hidden size 30 is not divisible by 4 heads")


def not_a_module():
    return 42


class ReturnsDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor):
        return {"logits": self.a(x)}


def returns_dict() -> nn.Module:
    return ReturnsDict()
