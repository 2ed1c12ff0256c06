"""The foundation every stage may import: errors and exit codes, the kinds a verdict speaks of,
the parsed-trace records, the safe writer, limits, evidence rules, the per-dtype table, and the
files a runner and difftest both read (teacher forcing, activation dumps, planted faults)."""
