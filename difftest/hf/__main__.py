"""`python -m difftest.hf`: the old spelling of `python -m difftest.runners.hf`, kept for one
release. It says so on stderr, once, and runs the runner unchanged."""

from __future__ import annotations

import sys

from difftest.runners.hf.__main__ import main

if __name__ == "__main__":
    print("difftest: `python -m difftest.hf` is deprecated and goes in difftest 0.3; "
          "run `python -m difftest.runners.hf`", file=sys.stderr)
    sys.exit(main())
