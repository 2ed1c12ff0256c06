"""Deprecated spelling of `difftest.runners.reference` (the reference runner):
`python -m difftest.reference` still runs it, with a warning, until difftest 0.3."""

from difftest.core.deprecation import warn_python


def __getattr__(name: str) -> object:
    """What `difftest.reference` exported (`RunnerOptions`, ...), from `difftest.runners.reference`, with a
    warning at the caller's line."""
    import difftest.runners.reference as now

    value = getattr(now, name)  # a name it never had fails as Python says
    warn_python(f"difftest.reference.{name}", f"difftest.runners.reference.{name}")
    return value
