"""Sampling ops: a token id per row drawn from a distribution (one folder per op)."""
