"""Floor 5: where cells run: the launcher protocol (backend.py), the local and Slurm backends, site
files, the scheduler registry, the loopback Slurm for tests."""
