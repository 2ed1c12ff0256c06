"""`python -m difftest.mlx`: the old spelling of `python -m difftest.runners.mlx`, kept for one
release. It says so on stderr, once, and runs the runner unchanged."""

from __future__ import annotations

import sys

from difftest.runners.mlx.__main__ import main

if __name__ == "__main__":
    print("difftest: `python -m difftest.mlx` is deprecated and goes in difftest 0.3; "
          "run `python -m difftest.runners.mlx`", file=sys.stderr)
    sys.exit(main())
