"""`python -m pipelines.cli`."""
from pipelines.cli import main

main()
