"""Idle-reclaim rules as data (catalog) and their pure evaluation and planning: no I/O but reading
the catalog and the warehouse. The loop that acts on them is pipelines/governance/."""
