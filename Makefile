# The README's two commands. Both create .venv and install everything (skipped when already installed).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test test-slow test-all docs results clean

install:
	@bash scripts/setup_env.sh

demo: install
	$(VENV)/bin/istjax train

# The default suite: every test but those marked slow (long end-to-end runs, MPI matrices, docs that run), on two
# pytest-xdist workers (the issue's budget: under 10 minutes on a 2-core machine). `make test-slow` runs the slow
# ones on two workers as well (most are compile-bound, and compiling uses one core; the mpiexec ranks some launch
# share the cores with the other worker's test) and lists the 20 longest; CI (.ci/run) runs both. --dist worksteal:
# a worker that runs out of tests takes queued ones from the other, so two long tests never end the run on one.
# Cases marked exhaustive (the heaviest repeats of a path other cases cover: more processes, another family) run
# only in `make test-all`, which runs everything; CI's budget (40 minutes for install, both suites and the docs)
# leaves them out.
test: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -n 2 --dist worksteal -m "not slow and not exhaustive" $(PYTEST_ARGS)

test-slow: install docs
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -n 2 --dist worksteal -m "slow and not exhaustive" --durations=20 $(PYTEST_ARGS)

test-all: install docs
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -n 2 --dist worksteal --durations=30 $(PYTEST_ARGS)

# The documentation site, into docs/_build/html (open docs/_build/html/index.html), warnings as errors. Pages run
# as notebooks at build: ISTJAX_DOCS_EXECUTE=cache (default: only pages whose code changed), force (every page; CI)
# or off. Data sets from ../shared/data unless ISTJAX_DATA_DIR says otherwise. The browser test (tests/test_docs_site.py,
# slow) opens the built site, so test-slow builds it first.
ISTJAX_DATA_DIR ?= $(abspath $(CURDIR)/../shared/data)
export ISTJAX_DATA_DIR
docs: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/sphinx-build -b html -W --keep-going -j 2 docs docs/_build/html

# Rewrites every table between <!-- report:NAME --> markers in README.md and docs/ from the committed results JSON
# (python -m experiments.report --check only compares; tests/test_report.py runs it).
results: install
	$(PY) -m experiments.report

clean:
	rm -rf $(VENV) .pytest_cache docs/_build
