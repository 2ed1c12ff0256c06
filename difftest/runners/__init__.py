"""Programs of their own that difftest runs as arms (`python -m difftest.runners.reference`,
`.hf`, `.mlx`): no stage imports them, and they import only the foundation and the producers."""
