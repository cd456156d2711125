"""Floor 5: the collectives benchmark (`python -m harness comm`): bench.py says what is
measured, run.py measures, cases.py holds one collective at one size, record.py writes it."""
