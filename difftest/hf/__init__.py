"""Deprecated spelling of `difftest.runners.hf` (the transformers runner):
`python -m difftest.hf` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import warn_python


def __getattr__(name: str) -> object:
    """What `difftest.hf` exported (`HFOptions`, ...), from `difftest.runners.hf`, with a
    warning at the caller's line."""
    import difftest.runners.hf as now

    value = getattr(now, name)  # a name it never had fails as Python says
    warn_python(f"difftest.hf.{name}", f"difftest.runners.hf.{name}")
    return value
