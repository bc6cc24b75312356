# avgbench: `make run` trains, `make test` runs the tests, `make docs` regenerates the docs' generated
# blocks (docs/generate.py); all set up .venv first.
PY := .venv/bin/python
ARGS ?=

.PHONY: setup run test bench docs

setup:
	bash scripts/setup.sh

run: setup
	$(PY) train.py $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

bench: setup
	$(PY) bench/run.py $(ARGS)

docs: setup
	$(PY) docs/generate.py
