# The README's two commands. Both create .venv and install everything (skipped when already installed).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test clean

install:
	@bash scripts/setup_env.sh

demo: install
	$(VENV)/bin/istjax train

test: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
