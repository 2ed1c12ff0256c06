"""Parsing of VT_SPEC_TRACE streams (vllm.cpp's lines and difftest's `[spec-logits]`)."""

from difftest.core.errors import NoTraceLines, TraceError
from difftest.trace.parser import (
    MAX_LINE_BYTES,
    fast_path_available,
    parse_lines,
    parse_text,
    parse_trace,
    require_trace_lines,
)

__all__ = [
    "MAX_LINE_BYTES",
    "NoTraceLines",
    "TraceError",
    "fast_path_available",
    "parse_lines",
    "parse_text",
    "parse_trace",
    "require_trace_lines",
]
