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

# The project's own tests, with ruff and mypy first, in two phases: everything that does not judge
# timing two modules at a time (pytest-xdist), then the modules that do, one after another
# (conftest.py lists them, SERIAL_MODULES). Each phase prints its own summary; either failing fails
# the target. A phase with nothing to run (ARGS selected only the other phase's tests) is fine,
# both empty is not.
WORKERS ?= 2
test: lint
	@echo "make test: parallel phase ($(WORKERS) workers)"; \
	parallel=0; $(BIN)/pytest --timeout=900 --phase parallel -n $(WORKERS) --dist loadfile $(ARGS) || parallel=$$?; \
	echo "make test: serial phase"; \
	serial=0; $(BIN)/pytest --timeout=900 --phase serial $(ARGS) || serial=$$?; \
	echo "make test: parallel phase exit $$parallel, serial phase exit $$serial"; \
	if [ -z "$(strip $(ARGS))" ] || [ "$$parallel$$serial" = 55 ]; then \
	  [ "$$parallel$$serial" = 00 ]; \
	else \
	  case "$$parallel$$serial" in 00|05|50) true;; *) false;; esac; \
	fi

# The documentation site from docs/ into site/, offline; a broken link or a page left out of the nav fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
