"""Inspection (floor 4, the top of the core): what a built row is made of (registers, SASS, occupancy) and
how it behaves under a profiler; it may use every floor below it."""
