"""The fast build path: a CUDA source without torch headers, built in well under a second.

A fast-path source (see ``kernels/cuda/common/rapid_llm.cuh``) is compiled as two
independent halves: the host code by the host C++ compiler against a light
header, the device code by NVRTC (``nvcc -cubin`` where NVRTC is missing).
The kernels the host code launches are read from its object file and
instantiated in the device pass; a generated table links the two, and the
cubin is embedded in the module's shared object. A binding built once per
Python (``fastcall.c``) calls the module's launchers with torch tensors.

Modules: :mod:`.builder` (the Builder), :mod:`.device` (the device pass),
:mod:`.symbols` (kernel references, ELF symbols), :mod:`.binding` (the call
binding and module loading).
"""
