"""The microbenchmark harness: the only sanctioned timer in rapid_llm."""
