# The two commands are `make demo` and `make test`; both set up what is missing first.
PYTHON := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test bench clean distclean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PYTHON) examples/demo/run_demo.py

# pytest exits 5 when it collects no tests; that is not a failure of the suite.
test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) || [ $$? -eq 5 ]

bench: setup
	$(PYTHON) benchmarks/run.py

# Build and cache litter; keeps .venv so the next setup stays fast (distclean removes it too).
clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf .venv
