"""Op groups. Each group's ``__init__`` registers its KernelSpec rows."""
