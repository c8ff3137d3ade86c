"""Dispatch (floor 3, above build): which row serves a call, ranked by the committed measurements, and the
ops as torch custom ops (what torch.compile traces)."""
