"""`python -m difftest.hf`: the old spelling of `python -m difftest.runners.hf`, kept for one
release. It says so on stderr, once, and runs the runner unchanged."""

from __future__ import annotations

import sys

from difftest.core.deprecation import warn_cli
from difftest.runners.hf.__main__ import main

if __name__ == "__main__":
    warn_cli("python -m difftest.hf", "python -m difftest.runners.hf")
    sys.exit(main())
