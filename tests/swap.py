"""Module settings swapped for the length of a block, where pytest's monkeypatch (a fixture per
test function) cannot be used: inside a hypothesis test, once per generated example."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def swapped(owner: object, **values: object) -> Iterator[None]:
    """`owner`'s attributes set to `values` inside the block, their own values back after it."""
    real = {name: getattr(owner, name) for name in values}
    try:
        for name, value in values.items():
            setattr(owner, name, value)
        yield
    finally:
        for name, value in real.items():
            setattr(owner, name, value)
