# zerolm: the two set-up commands are `make demo` and `make test`.
# Both run scripts/setup.sh first (idempotent: installs only what is missing).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-all demo bench clean

all: build

setup:
	@scripts/setup.sh

# The trainer (pretrain_gpt) is built when the project's .venv holds torch (LibTorch).
configure: setup
	@P=$$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true); \
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  $${P:+-DZLM_BUILD_TRAINER=ON -DCMAKE_PREFIX_PATH=$$P} $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Default suite: everything except labels `slow` and `gpu` (see README).
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE 'slow|gpu'

# Every test that can run on this machine, slow ones included.
test-all: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE gpu

demo: build
	@scripts/demo.sh

bench: configure
	@cmake -S . -B $(BUILD_DIR) -DZLM_BUILD_BENCHMARKS=ON >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)
	@for b in tests/bench/bench_*.sh; do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD_DIR)
