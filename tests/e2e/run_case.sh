#!/usr/bin/env bash
# End-to-end driver: runs one CLI case in a fresh temporary directory and diffs
# the results against the case's goldens.
#
#   run_case.sh BIN_DIR DATA_DIR CASE_DIR
#
# A case directory holds:
#   args            the command line (first word: the tool in BIN_DIR); the
#                   placeholders @DATA@ (tests/data), @CASE@ (the case dir) and
#                   @OUT@ (the fresh temp dir, also the working directory) are
#                   replaced; lines are joined with spaces
#   expect_rc       expected exit code (default 0)
#   expected/       files that must exist under @OUT@ with identical bytes;
#                   expected/stdout is compared with the tool's stdout
#   stderr_contains one fixed string per line that stderr must contain
#   check.sh        optional extra checks, run as `bash check.sh OUT_DIR BIN_DIR DATA_DIR`
# ZLM_UPDATE_GOLDENS=1 rewrites expected/ from this run (review the diff!).
set -uo pipefail
BIN_DIR=$1 DATA_DIR=$2 CASE_DIR=$(cd "$3" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL [$CASE_DIR]: $*" >&2; exit 1; }

args=$(tr '\n' ' ' < "$CASE_DIR/args")
args=${args//@DATA@/$DATA_DIR}
args=${args//@CASE@/$CASE_DIR}
args=${args//@OUT@/$OUT}
read -r -a words <<< "$args"
tool=${words[0]}
cd "$OUT"
"$BIN_DIR/$tool" "${words[@]:1}" > "$OUT/.stdout" 2> "$OUT/.stderr"
rc=$?
want_rc=0
[[ -f "$CASE_DIR/expect_rc" ]] && want_rc=$(cat "$CASE_DIR/expect_rc")
if [[ $rc != "$want_rc" ]]; then
  cat "$OUT/.stderr" >&2
  fail "exit code $rc, expected $want_rc"
fi
if [[ -f "$CASE_DIR/stderr_contains" ]]; then
  while IFS= read -r needle; do
    [[ -z "$needle" ]] && continue
    needle=${needle//@OUT@/$OUT}
    grep -qF -- "$needle" "$OUT/.stderr" || { cat "$OUT/.stderr" >&2; fail "stderr lacks: $needle"; }
  done < "$CASE_DIR/stderr_contains"
fi
if [[ "${ZLM_UPDATE_GOLDENS:-0}" == "1" && -d "$CASE_DIR/expected" ]]; then
  for f in "$CASE_DIR"/expected/*; do
    name=$(basename "$f")
    [[ -L "$f" ]] && continue  # goldens linked to reference fixtures are never rewritten
    if [[ $name == stdout ]]; then cp "$OUT/.stdout" "$f"; else cp "$OUT/$name" "$f"; fi
  done
  echo "updated goldens of $CASE_DIR"
fi
if [[ -d "$CASE_DIR/expected" ]]; then
  for f in "$CASE_DIR"/expected/*; do
    name=$(basename "$f")
    got="$OUT/$name"
    [[ $name == stdout ]] && got="$OUT/.stdout"
    [[ -f "$got" ]] || fail "missing output $name"
    cmp -s "$f" "$got" || { diff <(head -c 2000 "$f" | od -c | head -20) <(head -c 2000 "$got" | od -c | head -20) >&2; fail "$name differs from the golden"; }
  done
fi
if [[ -f "$CASE_DIR/check.sh" ]]; then
  bash "$CASE_DIR/check.sh" "$OUT" "$BIN_DIR" "$DATA_DIR" || fail "check.sh failed"
fi
# No temporary files may be left behind.
leftover=$(find "$OUT" -name '*.tmp.*' | head -1)
[[ -z "$leftover" ]] || fail "temporary file left behind: $leftover"
echo "ok [$CASE_DIR]"
