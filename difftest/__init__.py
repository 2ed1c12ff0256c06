"""difftest: compare what two arms of a speculative-decoding runner drafted, and say whether
the comparison could have failed at all."""

__version__ = "0.1.0"
