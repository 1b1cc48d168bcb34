"""The safetensors format, written (and read back for tests) without the safetensors package:
8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
raw little-endian tensor bytes, each tensor's [begin, end) relative to the end of the header."""
import json
import struct
from typing import Dict, Mapping

import sys

import torch

if sys.byteorder != "little":  # safetensors data is little-endian; we write native bytes
    raise ImportError("pipewright_export.safetensors_io needs a little-endian host")

_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_TORCH = {v: k for k, v in _DTYPES.items()}


def _raw_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same 2 bytes as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()  # this host is little-endian (checked at import)


def encode(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] = {}) -> bytes:
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _DTYPES:
            raise ValueError(f"safetensors: tensor '{name}' has unsupported dtype {t.dtype}")
        data = _raw_bytes(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def save_file(tensors: Mapping[str, torch.Tensor], path: str,
              metadata: Mapping[str, str] = {}) -> None:
    with open(path, "wb") as f:
        f.write(encode(tensors, metadata))


def load_file(path: str) -> Dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out: Dict[str, torch.Tensor] = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _TORCH[info["dtype"]]
        raw = bytearray(blob[8 + n + begin:8 + n + end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else \
                torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out
