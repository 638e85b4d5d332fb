# The two commands a newcomer needs: `make demo` and `make test`.
.PHONY: setup components demo demo-pack test test-quick lint bench dev

setup:
	@bash scripts/setup.sh

components:
	@bash scripts/components.sh

demo: setup
	.venv/bin/gpupool demo

# Two months (October and November 2026), each month's capacity advice recorded at its end, and
# November's review packs: the pool's in English and Chinese and every tenant's (docs/pack.md).
demo-pack: setup components
	.venv/bin/gpupool demo --start 2026-10-01 --days 61 --no-baseline
	.venv/bin/gpupool recommend --month 2026-10 --whatif-top 1
	.venv/bin/gpupool recommend --month 2026-11 --whatif-top 1
	.venv/bin/gpupool pack --month 2026-11 --all-tenants
	.venv/bin/gpupool pack --month 2026-11 --lang zh

# Two pytest-xdist workers more than the cores: tests wait on real servers (Slurm, Prometheus, a browser)
# and on homes another worker builds (built_once), and the spare workers may use the CPU meanwhile
# (docs/testing.md: a gain not shown against nproc+1 on this machine's drifting speed).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))

# Bytecode caches written even where PYTHONDONTWRITEBYTECODE is set (as on these machines): the tests start
# gpupool, dagster and streamlit processes that would otherwise compile the project's modules each time,
# and pytest would rewrite the test modules' asserts again in every process. 15% less CPU in tests that
# start processes (bench/README.md, "Figures the code's choices rest on").
PYTEST = PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -n $(TEST_WORKERS)

test: setup components
	$(PYTEST) --durations=25

test-quick: setup
	$(PYTEST) -m "not slow"

lint: setup
	.venv/bin/ruff check pipelines expectations allocator tests bench
	.venv/bin/sqlfluff lint --processes 2 models/staging models/marts models/metrics

bench: setup
	.venv/bin/python bench/bench_dcgm_ingest.py

dev: setup
	.venv/bin/dagster dev
