"""Kernels with one known defect each, and their fixed twins: what ``verify`` must catch (README.md)."""
