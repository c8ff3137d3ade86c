"""Rotary position embedding: one folder per op (its declaration, reference, rows and figures)."""
