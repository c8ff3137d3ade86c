"""IPython integration: the %%cuda_jit magic and the widgets."""
