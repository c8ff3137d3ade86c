"""Model pieces built from rapid_llm.kernels ops: what tests compile and benchmarks time end to end.

Above the kernels (it calls ``K.<op>``), below nothing: the core never imports it.
"""
