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

.PHONY: demo test install clean doctor

$(VENV)/.installed: pyproject.toml
	$(BASE_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" "$(TRITON_SPEC)"
	$(PY) -m pip install -q -e '.[dev,chain]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/cacheon demo

# The sandbox wall in force here (exit 0 only when every layer holds; see docs/security.md).
doctor: $(VENV)/.installed
	$(VENV)/bin/cacheon doctor

test: $(VENV)/.installed
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .cacheon
