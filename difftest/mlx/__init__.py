"""Deprecated spelling of `difftest.runners.mlx` (the mlx-lm runner):
`python -m difftest.mlx` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import warn_python


def __getattr__(name: str) -> object:
    """What `difftest.mlx` exported (`MLXOptions`, ...), from `difftest.runners.mlx`, with a
    warning at the caller's line."""
    import difftest.runners.mlx as now

    value = getattr(now, name)  # a name it never had fails as Python says
    warn_python(f"difftest.mlx.{name}", f"difftest.runners.mlx.{name}")
    return value
