"""`python -m difftest.mlx`: the old spelling of `python -m difftest.runners.mlx`, kept for one
release. It says so on stderr, once, and runs the runner unchanged."""

from __future__ import annotations

import sys

from difftest.core.deprecation import warn_cli
from difftest.runners.mlx.__main__ import main

if __name__ == "__main__":
    warn_cli("python -m difftest.mlx", "python -m difftest.runners.mlx")
    sys.exit(main())
