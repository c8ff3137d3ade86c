"""The registry (floor 1, above platform): op declarations and their rows, and what an op's schema and source are.

Nothing here imports build, dispatch, verification or inspection; they
subscribe to it (``spec.on_change``, ``spec.on_declare``) and the package
facade wires the discoverers in (``rapid_llm.kernels.__init__``).
"""
