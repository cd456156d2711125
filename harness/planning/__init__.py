"""Floor 5: the planner's commands: per-layer profiles of this device (profile.py; ranks
profiled together keep in step through cohort.py) and `harness plan` (plan.py); the planning
itself is results.planner (torch-free)."""
