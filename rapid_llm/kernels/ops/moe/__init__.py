"""Mixture-of-experts ops: one folder per op (its declaration, reference, rows and figures)."""
