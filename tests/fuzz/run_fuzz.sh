#!/usr/bin/env bash
# Builds the libFuzzer target for the .idx reader with clang and runs it for a
# short while (FUZZ_SECONDS, default 20) from a seed corpus of real indexes.
#   run_fuzz.sh SOURCE_DIR WORK_DIR
# Exit 77 (ctest: skipped) when clang with libFuzzer is not installed.
set -euo pipefail
SRC=$1 WORK=$2
mkdir -p "$WORK/corpus"
CXX=$(command -v clang++ || true)
if [[ -z "$CXX" ]] || ! echo 'int main(){}' | "$CXX" -x c++ -fsanitize=fuzzer-no-link - -o /dev/null 2>/dev/null; then
  echo "SKIP: clang++ with libFuzzer not installed (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
"$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$SRC" \
  "$SRC/tests/fuzz/megatron_idx_fuzz.cpp" "$SRC/formats/megatron_mmap.cpp" "$SRC/common/core/error.cpp" \
  "$SRC/common/core/output_file.cpp" "$SRC/common/core/mapped_file.cpp" -o "$WORK/megatron_idx_fuzz"
# Seeds: real index files with a matching .bin size prefix.
for p in test_text_document ag_news_prompt_targets_document ag_news_prompt_inputs_document; do
  python3 - "$SRC/tests/data/megatron/$p" "$WORK/corpus/$p" <<'PY'
import os, struct, sys
prefix, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as f:
    f.write(struct.pack("<Q", os.path.getsize(prefix + ".bin")))
    f.write(open(prefix + ".idx", "rb").read())
PY
done
"$WORK/megatron_idx_fuzz" -max_total_time="${FUZZ_SECONDS:-20}" -max_len=65536 -print_final_stats=1 "$WORK/corpus" 2>&1 | tail -15
