"""Verification (floor 3, above build, beside dispatch): golden checks of a row against its op's oracle, the
defect probes, and the child process that runs them out of the caller's way."""
