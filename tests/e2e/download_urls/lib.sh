# Sourced by the shell tests that fetch from tests/e2e/download_urls/server.py (needs SRC and PY).
# start_server DIR ARGS...: the server on 127.0.0.1 with ARGS (--docs FILE, --pages DIR); sets PORT
# and SERVER_PID. The caller kills SERVER_PID on exit.
start_server() {
  local dir=$1
  shift
  "$PY" "$SRC/tests/e2e/download_urls/server.py" --port-file "$dir/port" "$@" &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -f $dir/port ]] && break; sleep 0.1; done
  [[ -f $dir/port ]] || { echo "FAIL: the test server did not start"; exit 1; }
  PORT=$(cat "$dir/port")
}

# init_test_dir: a scratch directory W, removed at exit together with the server (for scripts
# that own their exit trap).
init_test_dir() {
  W=$(mktemp -d)
  SERVER_PID=""
  trap '[[ -n $SERVER_PID ]] && kill $SERVER_PID; rm -rf "$W"' EXIT
}

# serve_docs DIR N: the first N OpenWebText fixture documents served as /doc/K (and /dup/K, a
# planted near-duplicate); sets PORT and SERVER_PID.
serve_docs() {
  head -"$2" "$SRC/tests/data/megatron/openwebtext-1000.decoded.jsonl" > "$1/docs.jsonl"
  start_server "$1" --docs "$1/docs.jsonl"
}
