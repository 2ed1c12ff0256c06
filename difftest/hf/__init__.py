"""Deprecated spelling of `difftest.runners.hf` (the transformers runner):
`python -m difftest.hf` still runs it, with a warning, until difftest 0.3."""
