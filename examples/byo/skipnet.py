"""A small network with glue code in its top-level forward and a skip connection, for
`pipewright-export` (docs/your-own-model.md).

The top-level forward does arithmetic and reshapes between its children (the exporter keeps
that glue in the node that consumes it), `fork` returns a tuple (its node gets two outputs), and
`blocks.0`'s output skips over `blocks.1`, `fork` and `mix` into `blocks.2`.
Vocabulary 64, sequence 16, hidden 32: about 23k parameters.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
SEQ = 16


class Residual(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Fork(nn.Module):
    """Returns two tensors: a value path and a gate path."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor):
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value, gate


class SkipNet(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Residual(dim) for _ in range(3)])
        self.fork = Fork(dim)
        self.mix = nn.Linear(2 * dim, 2 * dim)  # mixes neighbouring positions pairwise
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) * 0.5 + 0.1
        a = self.blocks[0](h)
        b = self.blocks[1](torch.tanh(a))
        value, gate = self.fork(b)
        # [B, S, D] -> [B, S/2, 2D]: neighbouring positions side by side, then back.
        pairs = self.mix(value.reshape(value.shape[0], -1, 2 * value.shape[2]))
        c = pairs.reshape(pairs.shape[0], -1, value.shape[2]) + a  # skip from blocks.0
        d = self.blocks[2](c) * torch.sigmoid(gate)
        return self.head(d - d.mean(dim=-1, keepdim=True))


def skipnet() -> nn.Module:
    torch.manual_seed(0)
    return SkipNet()
