"""The one path a command takes: a plan of arms and comparisons (with the overrides of their
rules), the run of its arms, and the judging of every comparison the plan names; the check,
probe, calibrate and localize flows built on it."""
