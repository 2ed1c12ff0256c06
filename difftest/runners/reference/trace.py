"""The producer formats of TRACE-FORMAT.md live in `difftest.emit`, written once for every
program that prints a trace; the runner imports them from here."""

from __future__ import annotations

from difftest.emit import (dflash_route, id_list, spec_config, spec_logits, spec_phase,
                           spec_coverage, spec_phase_dev, spec_propose, spec_sample, spectrace)

__all__ = ["dflash_route", "id_list", "spec_config", "spec_logits", "spec_phase",
           "spec_coverage", "spec_phase_dev", "spec_propose", "spec_sample", "spectrace"]
