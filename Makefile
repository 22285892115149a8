# Two commands on a fresh machine:  `make demo` (main job on the embedded local chain + CPU
# arena) and `make test` (the CPU test suite). Both create .venv and install on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# The sandboxed user must be able to read the interpreter: prefer the distribution's
# world-readable python over one under a 0700 home (pyenv under /root).
BASE_PYTHON ?= $(firstword $(wildcard /usr/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.11) python3)
# CPU wheel of torch for laptops/CI; on a GPU box install the `gpu` extra instead.
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton==3.6.0
# The CUDA compile lane (native/, the `native` extra: nvcc 13.0 from PyPI, ~100 MB of wheels, ~2 s to install here)
# and CUTLASS/CuTe headers for it: headers only, so without the wheel's Python dependencies (scipy, cuda-python ...).
CUTLASS_SPEC ?= nvidia-cutlass==4.2.0.0
# pytest-xdist workers: on the 2-core CI box a serial run left a core idle while tests waited on
# sandboxed subprocesses (full suite: 26.6 min serial; 18.9 min with 2 workers, measured). Three on
# two cores: the suite's tests wait on subprocesses, sockets and sleeps, and a third worker fills
# those waits (same clone, same box, 2026-12-05: 673 s with -n 2, 617 s with -n 3; vmstat idle 0-5 %)
TEST_JOBS ?= 3
# --dist worksteal: a worker that runs dry takes half of the other's queue. The default (load) hands
# each worker a fixed first eighth of the collection, so tests/conftest.py's heavy-first files all
# landed on one worker (simulated from measured durations: 889 s vs 651 s; worksteal 772 vs 767).
TEST_DIST ?= --dist worksteal
# --durations: every run lists its slowest tests, so the suite-time budget (~12 min) stays visible

.PHONY: demo test test-fast lint install clean doctor

# compileall: sandboxed children run as another uid that cannot write __pycache__; without it they
# recompile the project's modules at every start (~0.13 CPU-s each, docs/benchmarks.md session 14).
# No -q: pip shows its own progress bars (on a terminal); the torch wheel alone takes minutes on a slow link.
$(VENV)/.installed: pyproject.toml
	@echo "== installing into $(VENV) (torch, triton, then this package; several minutes on first use) =="
	$(BASE_PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH_SPEC)" "$(TRITON_SPEC)"
	$(PY) -m pip install -e '.[dev,chain,native]'
	$(PY) -m pip install --no-deps "$(CUTLASS_SPEC)"
	$(PY) -m compileall -q cacheon_subnet arena seams native
	touch $@
	@echo "== installed. The CLI is $(VENV)/bin/cacheon; to type plain \`cacheon\`: source $(VENV)/bin/activate =="

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/cacheon demo
	@echo "(cacheon is $(VENV)/bin/cacheon; \`source $(VENV)/bin/activate\` puts it on PATH)"

# The sandbox wall in force here (exit 0 only when every layer holds; see docs/security.md).
doctor: $(VENV)/.installed
	$(VENV)/bin/cacheon doctor

test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_JOBS) $(TEST_DIST) --durations=40

# The quick loop while editing: every test but those marked @pytest.mark.slow (each over ~1.5 s on
# the 2-core box; the marks are in the test files). Under 3 minutes on 2 cores; `make test` runs all.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_JOBS) $(TEST_DIST) -m "not slow" --durations=20

# The checks the pre-commit hook runs (.pre-commit-config.yaml), read-only: nothing is rewritten.
# CI runs them through the suite (tests/test_lint.py, tests/test_types.py), so .ci/run does not repeat them.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .cacheon
