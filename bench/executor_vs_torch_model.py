"""The GPT of bench/executor_vs_torch.sh (issue 35): 8 pre-LN blocks, 4 heads, vocabulary 512.

`gpt_large` (d_model 256, sequence 128: compute-bound) and `gpt_small` (d_model 64, sequence 32:
about 16x less compute per sample, per-action overhead and messages dominate). The top-level
forward calls `embed`, the blocks `h.0` ... `h.7` and `head`, so `pipewright-export` cuts it into
10 nodes and the benchmark's torch side builds each stage from the same submodules.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 512
LAYERS = 8
HEADS = 4
SIZES = {"large": (256, 128), "small": (64, 32)}  # (d_model, sequence)


class Embed(nn.Module):
    def __init__(self, hidden: int, seq: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, hidden)
        self.wpe = nn.Parameter(torch.randn(seq, hidden) * 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx) + self.wpe


class Block(nn.Module):
    def __init__(self, hidden: int, seq: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)
        self.scale = 1.0 / math.sqrt(hidden // HEADS)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq) == 0,
                             persistent=False)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = F.softmax(att.masked_fill(self.mask, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Head(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


class GPT(nn.Module):
    def __init__(self, hidden: int, seq: int) -> None:
        super().__init__()
        self.embed = Embed(hidden, seq)
        self.h = nn.ModuleList([Block(hidden, seq) for _ in range(LAYERS)])
        self.head = Head(hidden)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.h:
            x = block(x)
        return self.head(x)


def gpt_large() -> nn.Module:
    torch.manual_seed(0)
    return GPT(*SIZES["large"])


def gpt_small() -> nn.Module:
    torch.manual_seed(0)
    return GPT(*SIZES["small"])
