"""KV-cache ops: writes into the paged caches attention reads (one folder per op)."""
