"""GPU-only tests, in the mirror of tests/: a machine without CUDA does not collect them (tests/conftest.py)."""
