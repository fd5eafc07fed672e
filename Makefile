# Two commands: `make run` and `make test`. Both bootstrap .venv on first use.
# `make test-fast` runs the unit tier alone (tests/tiers.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-fast bootstrap lint bench eval sample fuzz clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: a looser spec (or a dependency's) would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	# The HTTP client, its own distribution (httpx and pydantic only): the server's API models are its.
	$(PY) -m pip install --quiet --disable-pip-version-check -e clients/python
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

bootstrap: $(STAMP)

# `make run PORT=8001` serves on another port (as does AGENT_MEMORY_PORT=8001).
run: $(STAMP)
	$(PY) -m cli.main serve --load-sample$(if $(PORT), --port $(PORT))

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

# The unit tier: no model, no store, no Ray. The others: $(PY) -m pytest -m store (ray, serve, stack).
test-fast: $(STAMP)
	$(PY) -m pytest -m unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

eval: $(STAMP)
	$(VENV)/bin/agent-memory eval --history examples/sample_history.jsonl --questions examples/sample_questions.jsonl

sample:
	$(PYTHON) examples/generate_sample.py --out-dir examples

bench: $(STAMP)
	$(PY) benchmarks/recall_latency.py

# Over 1,000 generated requests (schemathesis, derandomized) against every endpoint of the real app,
# started on loopback by the test fixtures, with a key of org globex; no 5xx, errors as documented.
fuzz: $(STAMP)
	FUZZ_EXAMPLES=60 FUZZ_COVERAGE=1 $(PY) -m pytest -q tests/test_fuzz.py

clean:
	rm -rf data
