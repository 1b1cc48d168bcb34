"""Writes a tiny hand-made TorchScript model for the executor's unit tests (issue 21):

  make_script_model.py OUT_DIR

OUT_DIR/model.json (the i21 model format, nodes of kind "torchscript"), OUT_DIR/nodes/*.pt,
OUT_DIR/init.safetensors (the state_dict), and OUT_DIR/expected.safetensors: for the batch
`idx` stored there, the whole module's logits, its mean cross-entropy loss against `target`, and
every state_dict parameter's gradient of that loss.

The module: embed (Embedding 10x4) -> block (two outputs: a Linear and relu(h) * scale, with a
persistent buffer `block.scale` and a non-persistent `block.table`) -> head (reads both block
outputs and, at input slot 2 that no edge feeds, the model input; its weight is tied to
embed.weight) -> out (logits times a learned gain; an int64 persistent buffer `out.calls`). `make_script_model.py OUT_DIR --data ROWS`
also writes OUT_DIR/x.npy, y.npy (token ids, next-token targets). Exit 77 without torch.
"""
import json
import os
import struct
import sys
from typing import Dict

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit(77)

VOCAB, DIM, SEQ, BATCH = 10, 4, 3, 2


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(DIM, DIM)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, DIM))
        self.register_buffer("table", torch.ones(DIM), persistent=False)

    def forward(self, h: torch.Tensor):
        return self.lin(h), torch.relu(h) * self.scale * self.table


class Gain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor([1.5]))
        self.register_buffer("calls", torch.tensor([3, 4]))  # an int64 persistent buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.block = Block()
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        self.out = Gain()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        a, b = self.block(self.embed(idx))
        return self.out(self.head(a + b) + 0.01 * idx.unsqueeze(-1).float())


# Node modules keep the original attribute paths (as the exporter's fx GraphModules do).
class EmbedNode(nn.Module):
    def __init__(self, m: Tiny) -> None:
        super().__init__()
        self.embed = m.embed

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.embed(idx)


class BlockNode(nn.Module):
    def __init__(self, m: Tiny) -> None:
        super().__init__()
        self.block = m.block

    def forward(self, h: torch.Tensor):
        return self.block(h)


class HeadNode(nn.Module):
    def __init__(self, m: Tiny) -> None:
        super().__init__()
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = nn.Parameter(m.head.weight.detach().clone())

    def forward(self, a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return self.head(a + b) + 0.01 * idx.unsqueeze(-1).float()


class OutNode(nn.Module):
    def __init__(self, m: Tiny) -> None:
        super().__init__()
        self.out = m.out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x)


def write_safetensors(path: str, tensors: Dict[str, torch.Tensor]) -> None:
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def value(name: str, dtype: str, shape) -> dict:
    return {"name": name, "dtype": dtype, "shape": list(shape)}


def main(out: str) -> None:
    torch.manual_seed(0)
    m = Tiny()
    os.makedirs(os.path.join(out, "nodes"), exist_ok=True)
    torch.jit.save(torch.jit.script(EmbedNode(m)), os.path.join(out, "nodes", "0_embed.pt"))
    torch.jit.save(torch.jit.script(BlockNode(m)), os.path.join(out, "nodes", "1_block.pt"))
    torch.jit.save(torch.jit.script(HeadNode(m)), os.path.join(out, "nodes", "2_head.pt"))
    torch.jit.save(torch.jit.script(OutNode(m)), os.path.join(out, "nodes", "3_out.pt"))
    with open(os.path.join(out, "nodes", "not_torchscript.pt"), "w") as f:
        f.write("this is not a TorchScript archive\n")
    f32 = "float32"
    model = {
        "version": 1, "name": "Tiny", "micro_batch_size": BATCH,
        "input": {"dtype": "int64", "shape": [SEQ]},
        "source": {"module": "tests/exec/make_script_model.py:Tiny", "torch": torch.__version__,
                   "init": "init.safetensors"},
        "nodes": [
            {"name": "embed", "kind": "torchscript", "script": {
                "file": "nodes/0_embed.pt", "inputs": [value("idx", "int64", [SEQ])],
                "outputs": [value("out", f32, [SEQ, DIM])],
                "parameters": [value("embed.weight", f32, [VOCAB, DIM])]}},
            {"name": "block", "kind": "torchscript", "script": {
                "file": "nodes/1_block.pt", "inputs": [value("h", f32, [SEQ, DIM])],
                "outputs": [value("out0", f32, [SEQ, DIM]), value("out1", f32, [SEQ, DIM])],
                "parameters": [value("block.lin.weight", f32, [DIM, DIM]),
                               value("block.lin.bias", f32, [DIM])],
                "buffers": [dict(value("block.scale", f32, [DIM]), persistent=True),
                            dict(value("block.table", f32, [DIM]), persistent=False)]}},
            {"name": "head", "kind": "torchscript", "script": {
                "file": "nodes/2_head.pt",
                "inputs": [value("a", f32, [SEQ, DIM]), value("b", f32, [SEQ, DIM]),
                           value("idx", "int64", [SEQ])],
                "outputs": [value("out", f32, [SEQ, VOCAB])],
                "parameters": [dict(value("head.weight", f32, [VOCAB, DIM]),
                                    tied_to="embed.weight")]}},
            {"name": "out", "kind": "torchscript", "script": {
                "file": "nodes/3_out.pt", "inputs": [value("x", f32, [SEQ, VOCAB])],
                "outputs": [value("out", f32, [SEQ, VOCAB])],
                "parameters": [value("out.gain", f32, [1])],
                "buffers": [dict(value("out.calls", "int64", [2]), persistent=True)]}},
        ],
        "edges": [
            {"from": "embed", "to": "block"},
            {"from": "block", "from_output": 0, "to": "head", "to_input": 0},
            {"from": "block", "from_output": 1, "to": "head", "to_input": 1},
            {"from": "head", "to": "out"},
        ],
    }
    with open(os.path.join(out, "model.json"), "w") as f:
        json.dump(model, f)
    write_safetensors(os.path.join(out, "init.safetensors"), dict(m.state_dict()))
    idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    target = torch.randint(0, VOCAB, (BATCH, SEQ))
    logits = m(idx)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
    loss.backward()
    expected = {"idx": idx, "target": target, "logits": logits, "loss": loss.reshape(1)}
    for name, p in m.named_parameters():
        expected["grad." + name] = p.grad
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)


def write_data(out: str, rows: int) -> None:
    import numpy as np
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (rows, SEQ + 1), generator=g)
    np.save(os.path.join(out, "x.npy"), tokens[:, :SEQ].numpy())
    np.save(os.path.join(out, "y.npy"), tokens[:, 1:].numpy())


if __name__ == "__main__":
    main(sys.argv[1])
    if len(sys.argv) == 4 and sys.argv[2] == "--data":
        write_data(sys.argv[1], int(sys.argv[3]))
