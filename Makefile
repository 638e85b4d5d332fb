# The two commands a newcomer needs: `make demo` and `make test`.
.PHONY: setup components demo test test-quick lint bench dev

setup:
	@bash scripts/setup.sh

components:
	@bash scripts/components.sh

demo: setup
	.venv/bin/gpupool demo

test: setup components
	.venv/bin/python -m pytest -q

test-quick: setup
	.venv/bin/python -m pytest -q -m "not slow"

lint: setup
	.venv/bin/ruff check pipelines expectations allocator tests bench

bench: setup
	.venv/bin/python bench/bench_dcgm_ingest.py

dev: setup
	.venv/bin/dagster dev
