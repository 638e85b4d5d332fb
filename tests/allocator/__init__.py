"""Tests of the allocator: pool, placement, engine rules, records."""
