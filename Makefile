# The two commands are `make demo` and `make test`; both set up what is missing first.
PYTHON := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup lock demo test gpu-check bench clean distclean

setup:
	@bash scripts/setup.sh

# Refresh requirements-dev.lock: the newest versions that satisfy pyproject.toml's dev extra (and torch's
# pin in constraints-dev.txt), and requirements-sagemaker.lock (.venv-sagemaker: the real SageMaker SDK the
# tests drive as a client); the next setup rebuilds each venv from its lock. Commit the lock with what needed it.
lock: setup
	CUSTOM_COMPILE_COMMAND="make lock" $(PYTHON) -m piptools compile -q --upgrade --allow-unsafe --strip-extras --extra dev \
		--no-emit-index-url --no-emit-find-links -c constraints-dev.txt -o requirements-dev.lock pyproject.toml
	CUSTOM_COMPILE_COMMAND="make lock" $(PYTHON) -m piptools compile -q --upgrade --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links -o requirements-sagemaker.lock requirements-sagemaker.in

demo: setup
	$(PYTHON) examples/demo/run_demo.py

# pytest exits 5 when it collects no tests; that is not a failure of the suite. The suite but the netns
# tests runs on TEST_WORKERS pytest-xdist workers, a module on one (tests/conftest.py says how): in one
# process the 2 cores were idle 40 % of the time, its jobs waiting. The netns tests run last, alone: beside
# the rest the whole took as long, and their Ray nodes start slowly under load. TEST_WORKERS=0: one process.
# The tests run as in an activated .venv: jobs find its tools first, as on the netns hosts (torch builds
# DeepSpeed's op with the ninja it finds, and a build by another ninja is not reused).
TEST_WORKERS ?= 2
IN_VENV := PATH="$(CURDIR)/.venv/bin:$$PATH"
test: setup
	$(IN_VENV) $(PYTHON) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "not netns" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(IN_VENV) $(PYTHON) -m pytest -q -p no:cacheprovider -m netns $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The tests that need an NVIDIA GPU (tests/gpu, real jobs on local_gpu, NCCL, NVML, CUDA traces, fp16/bf16,
# DeepSpeed): run them on a machine with one and a CUDA build of torch; without, each skips saying why.
gpu-check: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider -rs -m gpu tests/gpu || [ $$? -eq 5 ]

bench: setup
	$(PYTHON) benchmarks/run.py

# Build and cache litter; keeps .venv so the next setup stays fast (distclean removes it too).
clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf .venv .venv-sagemaker
