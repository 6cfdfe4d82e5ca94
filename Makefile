# zerolm: the two set-up commands are `make demo` and `make test`.
# Both run scripts/setup.sh first (idempotent: installs only what is missing).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-scale demo bench clean

all: build

setup:
	@scripts/setup.sh

# The trainer (pretrain_gpt) is built from the LibTorch of the project's .venv; without torch
# configure stops with a message (ZLM_NO_TRAINER=1 builds the data tools alone).
configure: setup
	@P=$$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true); \
	if [ -z "$$P" ] && [ "$(ZLM_NO_TRAINER)" != 1 ]; then \
	  echo "configure: .venv has no torch, so pretrain_gpt and its tests would not be built; run scripts/setup.sh" \
	       "(or make ZLM_NO_TRAINER=1 for the data tools alone)" >&2; exit 1; fi; \
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  $${P:+-DZLM_BUILD_TRAINER=ON -DCMAKE_PREFIX_PATH=$$P} $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The whole suite except labels `gpu` (tests that need a GPU; see README) and `scale` (generated
# corpora of gigabytes: make test-scale).
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE 'gpu|scale'

test-scale: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -L scale

demo: build
	@scripts/demo.sh

# Every benchmark at full size (tests/bench/; each checks its results before timing and fails
# on a difference; the tables go to docs/benchmarks.md). `make test` runs them at a smoke size.
bench: configure
	@cmake -S . -B $(BUILD_DIR) -DZLM_BUILD_BENCHMARKS=ON >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)
	@for b in tests/bench/bench_*.sh; do echo "== $$b"; BIN=$(BUILD_DIR)/bin $$b || exit 1; done

clean:
	rm -rf $(BUILD_DIR)
