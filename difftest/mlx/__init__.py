"""Deprecated spelling of `difftest.runners.mlx` (the mlx-lm runner):
`python -m difftest.mlx` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import forwarded

# what the old package exported (RunnerOptions, HFOptions, MLXOptions, ...), with a warning
__getattr__ = forwarded("difftest.mlx", "difftest.runners.mlx")
