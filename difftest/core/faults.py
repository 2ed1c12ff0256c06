"""A planted fault's text, `MODULE:KIND[:SIZE]`, as every runner reads it: one named module's
output perturbed so that `difftest localize` has a known answer. Each runner checks MODULE
against its own forward (difftest.runners.reference.faults, difftest.runners.hf.faults) and plants it.

Kinds: `scale` (output times 1 + SIZE, default 1e-2), `noise` (plus seeded Gaussian noise of
SIZE times the output's RMS, default 1e-3), `mask` (one attention layer's mask changed).
"""

from __future__ import annotations

from dataclasses import dataclass

from difftest.core.errors import UsageError

FAULT_ENV = "DIFFTEST_FAULT"
FAULT_KINDS: tuple[str, ...] = ("scale", "noise", "mask")
DEFAULT_SIZE = {"scale": 1e-2, "noise": 1e-3, "mask": 0.0}


@dataclass(frozen=True)
class Fault:
    module: str
    kind: str
    size: float

    @property
    def text(self) -> str:
        return self.module if self.kind == "mask" else f"{self.module}:{self.kind}:{self.size:g}"

    def mask_layer(self) -> int | None:
        """The layer whose mask this fault changes, if it is a mask fault."""
        return int(self.module.split(".")[1]) if self.kind == "mask" else None


def parse_fault_text(text: str) -> Fault:
    """The runner-independent part of `MODULE:KIND[:SIZE]`: its shape, kind and size (each
    runner checks the module against its own forward)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise UsageError(f"bad fault {text!r}; use MODULE:KIND[:SIZE], e.g. layers.1.attn:scale:0.01")
    module, kind = parts[0], parts[1]
    if kind not in FAULT_KINDS:
        raise UsageError(f"fault {text!r}: unknown kind {kind!r}; choose one of "
                         f"{', '.join(FAULT_KINDS)}")
    size = DEFAULT_SIZE[kind]
    if len(parts) == 3:
        try:
            size = float(parts[2])
        except ValueError:
            raise UsageError(f"fault {text!r}: size {parts[2]!r} is not a number") from None
        if not size > 0 or size != size or size == float("inf"):
            raise UsageError(f"fault {text!r}: size must be a finite number > 0")
    return Fault(module, kind, size)
