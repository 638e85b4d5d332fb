"""Pool configurations shipped with the allocator (package data: default.yaml)."""
