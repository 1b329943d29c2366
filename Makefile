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

# The project's own tests, with ruff and mypy first, in two pytest runs: the tests whose results
# do not depend on a free CPU on WORKERS processes at once (pytest-xdist, whole modules per
# process), then the `timing` tests (conftest.py's TIMING_MODULES) alone in one process. Both runs
# always run and either failing fails the target. Without ARGS each must run tests; with ARGS one
# that the selection leaves empty (pytest's exit 5) is fine, both empty is not.
WORKERS ?= 2
SELECTED := $(if $(strip $(ARGS)),yes,no)
test: lint
	@parallel=0; $(BIN)/pytest --timeout=900 --phase=parallel -n $(WORKERS) --dist=loadfile $(ARGS) || parallel=$$?; \
	timing=0; $(BIN)/pytest --timeout=900 --phase=timing $(ARGS) || timing=$$?; \
	echo "make test: parallel run exit $$parallel, timing run exit $$timing"; \
	case "$$parallel $$timing $(SELECTED)" in "0 0 "*|"0 5 yes"|"5 0 yes") ;; *) exit 1;; esac

# The documentation site from docs/ into site/, offline; a broken link or a page left out of the nav fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
