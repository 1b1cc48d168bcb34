"""CTest's entry to the Python tests: exit 77 (CTest SKIP_RETURN_CODE) when torch or pytest is
missing, else pytest's own exit code. Run with the venv's python (tools/install-deps), whose
safetensors the tests that load safetensors files need (they skip without it)."""
import os
import sys

try:
    import pytest
    import torch  # noqa: F401  (only: is it there?)
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", here] + sys.argv[1:]))
