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
