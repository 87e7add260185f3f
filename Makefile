# Flywheel — the README's commands. `make help` lists them.
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
UV_VERSION := 0.13.8

.DEFAULT_GOAL := help
.PHONY: help install demo agent-warm-up test lint unit stack-up stack-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-11s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml overrides.txt
	@scripts/ensure-system.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --python $(PY) --override overrides.txt -e '.[platform,dev]'
	@touch $@

install: $(VENV)/.installed ## create .venv and install everything (Java/Maven too, when root)

demo: install ## run the main job on the embedded local stack
	$(BIN)/flywheel demo

agent-warm-up: install ## retrain the agent's shipped warm-up (after a change to its corpus or config)
	PYTHONPATH=. $(BIN)/python scripts/ship_agent_warm_up.py

lint: install ## ruff (lint + format check), mypy (strict) and the import-linter contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: install ## unit tests only: no broker needed
	@scripts/ensure-system.sh --browser
	$(BIN)/pytest -m "not integration"

test: lint ## lint, then unit + integration tests (on a stack of their own, started and stopped by the tests)
	@scripts/ensure-system.sh --browser
	$(BIN)/pytest

stack-up: install ## start the local broker and registry
	$(BIN)/flywheel stack up

stack-down: install ## stop them, and the tests' own stack if one is left running (data is kept)
	$(BIN)/flywheel stack down
	env $$(grep -v '^#' tests/test-stack.env | xargs) $(BIN)/flywheel stack down

clean: ## stop the stacks and delete .flywheel/ (all local data, the tests' stack's too)
	-test -x $(BIN)/flywheel && $(MAKE) stack-down
	rm -rf .flywheel
