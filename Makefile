# The two quickstart commands: `make qmax` (measure the local default) and `make test`.
# Both create the virtual environment on first use; ARGS passes extra options to pytest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: install qmax test lint docs

$(STAMP): pyproject.toml container/pyproject.toml infra/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e './container[model,ja,onnx]' -e '.[all,dev,docs]' -e ./infra
	touch $@

install: $(STAMP)

# Q_max of the local container (trained Kokoro-82M v1.0 on this CPU): artifact and HTML report in reports/.
qmax: $(STAMP)
	$(BIN)/pytest -m qmax --html=reports/qmax-report.html --self-contained-html $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@echo "mypy: type-checking pytest_tts_scaling, tts_container, speech_infra and the tests (about 2 min on 2 cores the first time; later runs reuse .mypy_cache)"
	$(BIN)/mypy
	# infra/tests is a folder of its own (its conftest.py beside container/tests' one): checked apart.
	$(BIN)/mypy infra/tests

# The project's own tests, with ruff and mypy first.
test: lint
	$(BIN)/pytest --timeout=900 $(ARGS)

# The documentation site from docs/ into site/, offline; a broken link or a page left out of the nav fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
