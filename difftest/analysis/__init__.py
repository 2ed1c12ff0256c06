"""Judging aligned traces: the trace audit, token and logit comparison, what the logit
instrument could see, the verdict, acceptance and rates, sequential tests and the noise floor."""
