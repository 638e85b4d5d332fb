"""Deterministic sample data (pool, allocator logs, DCGM telemetry) for the demo and tests."""
from pipelines.sample.generator import SampleManifest, generate_sample
from pipelines.sample.workload import KnownFacts

__all__ = ["KnownFacts", "SampleManifest", "generate_sample"]
