"""Delivering enforcement actions to an engine: the built-in allocator, Slurm or Kueue."""
