#!/usr/bin/env bash
# Builds, on the CPU machine, what the GPU kit carries to the GPU machine, so
# that its scarce minutes measure instead of compiling:
#   build-kit/bin   pretrain_gpt, zlm_bench_optimizer, zlm_trainer_gpu_tests in the
#                   trainer-alone configuration (no data tools, no simdjson: no
#                   DeepSpeed JSON configs, which the kit does not use), without
#                   RUNPATH (the kit sets LD_LIBRARY_PATH to the GPU machine's
#                   torch and NVIDIA libraries), the fused-loss kernel for sm_90
#   build-kit/lib   the libraries they need that the GPU machine lacks (none since
#                   Highway's kernels stopped linking libhwy.so; kept for the scripts)
#   .llmc           a copy of llm.c (../shared/anchors/llm.c) for part 7, ignored by git
# Then it checks that no binary has a RUNPATH or needs libsimdjson or libhwy, and prints
# the device tool's carry list.
#   tests/bench/gpu/build_kit.sh [LLMC_SOURCE]
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=.venv/bin/python
PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-kit -G Ninja -DCMAKE_BUILD_TYPE=Release -DZLM_BUILD_DATA_TOOLS=OFF -DZLM_BUILD_TESTS=ON -DZLM_BUILD_TRAINER=ON \
  -DCMAKE_SKIP_RPATH=ON -DCMAKE_DISABLE_FIND_PACKAGE_simdjson=ON -DCMAKE_PREFIX_PATH="$PREFIX" > /dev/null
cmake --build build-kit -j "$(nproc)" --target pretrain_gpt zlm_bench_optimizer zlm_trainer_gpu_tests
mkdir -p build-kit/lib
for b in build-kit/bin/pretrain_gpt build-kit/bin/zlm_bench_optimizer build-kit/bin/zlm_trainer_gpu_tests; do
  if readelf -d "$b" | grep -q 'RUNPATH\|RPATH'; then echo "build_kit: $b has a RUNPATH" >&2; exit 1; fi
  if readelf -d "$b" | grep -q 'libsimdjson\|libhwy'; then echo "build_kit: $b needs libsimdjson or libhwy" >&2; exit 1; fi
done
src=${1:-../shared/anchors/llm.c}
if [[ -d $src ]]; then rm -rf .llmc && cp -r "$src" .llmc; fi
du -sh build-kit/bin build-kit/lib .llmc 2>/dev/null
echo 'carry: ["build-kit/bin", "build-kit/lib", ".llmc"]   then PART=0..7 tests/bench/gpu/run_gpu.sh, one part per command'
