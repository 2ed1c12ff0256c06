"""Hooks that make engines written by others print difftest's trace through `difftest.emit`.

Each adapter module imports its engine lazily: importing `difftest.adapters` costs nothing.
"""
