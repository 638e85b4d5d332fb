"""Slurm: the real one-node cluster, accounting ingest, GPU indices and enforcement."""
