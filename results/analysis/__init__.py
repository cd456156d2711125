"""Floor 3: what the frames mean: speedup tables, the pipeline bubble, roofline, collectives,
trends across commits, scaling, and the one event engine for pipeline schedules (schedule.py:
measured events replayed, planned steps simulated)."""
