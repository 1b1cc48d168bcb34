"""Model inputs as given on the command line (no torch import: --help stays fast)."""
from dataclasses import dataclass
from typing import Tuple

DTYPE_CHOICES = ("float32", "int64", "float64", "bool")


@dataclass(frozen=True)
class InputSpec:
    """One model input: per-sample shape and dtype name (one of DTYPE_CHOICES)."""

    shape: Tuple[int, ...]
    dtype: str
