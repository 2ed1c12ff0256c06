"""Deprecated spelling of `difftest.runners.hf` (the transformers runner):
`python -m difftest.hf` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import forwarded

# what the old package exported (RunnerOptions, HFOptions, MLXOptions, ...), with a warning
__getattr__ = forwarded("difftest.hf", "difftest.runners.hf")
