"""Building rows (floor 2, above the registry): the content-keyed build cache, the JIT compile of a .cu row,
the fast path's C call, build facts, and promote (writing a row into the package)."""
