"""A tiny GPT-2-style language model for `pipewright-export` (docs/your-own-model.md).

nanoGPT's layout: token embedding TIED to the output head (`lm_head.weight` is
`transformer.wte.weight`), learned positions, pre-LN blocks with causal self-attention.
Vocabulary 64, sequence 16, hidden 32, 2 blocks: about 30k parameters.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
SEQ = 16


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(hidden // heads)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        # Persistent, as in HF GPT-2: it is part of the state_dict.
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, seq: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, seq)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, hidden: int = 32, heads: int = 4,
                 layers: int = 2) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, hidden),
            wpe=nn.Embedding(seq, hidden),
            h=nn.ModuleList([Block(hidden, heads, seq) for _ in range(layers)]),
            ln_f=nn.LayerNorm(hidden),
        ))
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does
        # Position ids as a non-persistent buffer: the positions are computed from it (and the
        # sequence length), never from the batch, so the exporter keeps them in the first block.
        self.register_buffer("pos_ids", torch.arange(seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(self.pos_ids[:t])
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def tiny_gpt2() -> nn.Module:
    torch.manual_seed(0)
    return GPT()
