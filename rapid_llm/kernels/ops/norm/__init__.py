"""Row-wise normalisations over the hidden dim: one folder per op; what both share sits here (norm_rows.py,
rms_norm_kernels.cuh)."""
