"""Parsing of VT_SPEC_TRACE streams (vllm.cpp's lines and difftest's `[spec-logits]`)."""

from difftest.trace.parser import parse_lines, parse_text, parse_trace

__all__ = ["parse_trace", "parse_text", "parse_lines"]
