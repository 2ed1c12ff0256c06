"""Deprecated spelling of `difftest.runners.reference` (the reference runner):
`python -m difftest.reference` still runs it, with a warning, until difftest 0.3."""
