"""Floor 1: the run record on disk: schema (files, statuses, the reader), toggle declarations,
strategy labels, paths."""
