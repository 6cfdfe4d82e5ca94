# Shared by the tutorial tests (tests/e2e/seeds/*.sh): run a README block as written.
#   source common.sh SOURCE_DIR BIN_DIR PYTHON
# sets SRC, BIN, PY, DATA and a fresh work directory W (the current directory, removed on exit),
# with BIN and the Python environment's bin (python, torchrun) first on PATH, as a user would have them.
SRC=$1 BIN=$2 PY=$3
[[ -x $PY ]] || PY=$(command -v python3)  # the data steps need only the standard library (readme_block.py)
DATA=$SRC/tests/data
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
cd "$W"
export PATH="$BIN:$(dirname "$PY"):$PATH"  # `python` and `torchrun` in the README are the project's .venv's
export PYTHONWARNINGS=ignore  # torch.distributed.launch's deprecation notice

# tutorial ID [--sub OLD NEW | --flag NAME VALUE]...: README.md's block ID with the test's changes,
# run by bash from the work directory; its output goes to ID.log, shown when it fails.
tutorial() {
  local id=$1
  shift
  "$PY" "$SRC/tests/e2e/seeds/readme_block.py" "$SRC/README.md" "$id" "$@" > "$id.sh" || exit 1
  if ! bash -euo pipefail "$id.sh" > "$id.log" 2>&1; then
    echo "FAIL: README block '$id' as run:"; cat "$id.sh"; echo "--- its output (last 40 lines):"; tail -n 40 "$id.log"; exit 1
  fi
}

fail() { echo "FAIL: $*"; exit 1; }

# A free TCP port on the loopback interface.
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The training losses of a metrics.jsonl, one per line ("iteration loss").
losses() { "$PY" -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "lm_loss" in r and "split" not in r: print(r["iteration"], r["lm_loss"])' "$1"; }
