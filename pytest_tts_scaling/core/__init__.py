"""The pure core: schema, statistics, verdicts, timelines, plans and simulations; no I/O
(tests/test_guards.py holds it)."""
