"""Deprecated spelling of `difftest.runners.reference` (the reference runner):
`python -m difftest.reference` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import forwarded

# what the old package exported (RunnerOptions, HFOptions, MLXOptions, ...), with a warning
__getattr__ = forwarded("difftest.reference", "difftest.runners.reference")
