"""`python -m allocator serve ...`: the allocator's commands without the rest of the gpupool CLI."""
from allocator.cli import allocator

allocator(prog_name="python -m allocator")
