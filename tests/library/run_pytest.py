"""CTest's entry to the Python module's tests (library.python): exit 77 (CTest SKIP_RETURN_CODE)
when pytest is missing, else pytest's exit code. PYTHONPATH points at the build tree's package."""
import os
import sys

try:
    import pytest
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", here, here] + sys.argv[1:]))
