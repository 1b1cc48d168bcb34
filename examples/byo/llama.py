"""A tiny torchtitan-style Llama decoder for `pipewright-export` (docs/your-own-model.md).

As in torchtitan's `Transformer`: grouped-query attention (4 query heads, 2 key/value heads),
rotary embeddings from a NON-persistent buffer `freqs_cis` of the top-level module that every
layer receives as `layer(h, freqs_cis)`, RMSNorm, SwiGLU feed-forward, layers in a ModuleDict.
The rotary table is real (cos, sin) rather than complex so that TorchScript and libtorch need no
complex support. Vocabulary 64, sequence 16, hidden 32, 4 layers: about 41k parameters.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
SEQ = 16


def precompute_freqs_cis(head_dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    """[end, head_dim // 2, 2]: cos and sin of position * frequency."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(end).float(), freqs)
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    # x: [bs, seq, heads, head_dim]; freqs_cis: [seq, head_dim // 2, 2]
    xr = x.reshape(x.shape[0], x.shape[1], x.shape[2], -1, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    cos = freqs_cis[..., 0].unsqueeze(0).unsqueeze(2)
    sin = freqs_cis[..., 1].unsqueeze(0).unsqueeze(2)
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(3)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xq = apply_rotary_emb(xq, freqs_cis)
        xk = apply_rotary_emb(xk, freqs_cis)
        keys = repeat_kv(xk, self.n_rep).transpose(1, 2)
        values = repeat_kv(xv, self.n_rep).transpose(1, 2)
        xq = xq.transpose(1, 2)
        scores = (xq @ keys.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.full((seqlen, seqlen), float("-inf"), device=x.device).triu(1)
        scores = F.softmax(scores + mask, dim=-1)
        out = (scores @ values).transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden_dim: int) -> None:
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, dim: int = 32, n_layers: int = 4,
                 n_heads: int = 4, n_kv_heads: int = 2, hidden_dim: int = 64) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        # torchtitan keeps the rotary table out of the state_dict: a non-persistent buffer.
        self.register_buffer("freqs_cis", precompute_freqs_cis(dim // n_heads, seq * 2),
                             persistent=False)
        self.layers = nn.ModuleDict(
            {str(i): TransformerBlock(dim, n_heads, n_kv_heads, hidden_dim)
             for i in range(n_layers)})
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seqlen = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[0:seqlen]
        for layer in self.layers.values():
            h = layer(h, freqs_cis)
        return self.output(self.norm(h))


def tiny_llama() -> nn.Module:
    torch.manual_seed(0)
    return Transformer()
