"""Deprecated spelling of `difftest.runners.mlx` (the mlx-lm runner):
`python -m difftest.mlx` still runs it, with a warning, until difftest 0.3."""
