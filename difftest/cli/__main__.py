"""`python -m difftest.cli` runs the command line, as `python -m difftest` does."""

from difftest.cli import main

main()
