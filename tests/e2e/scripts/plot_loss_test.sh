#!/usr/bin/env bash
# scripts/plot_loss.py over a metrics.jsonl holding every kind of record pretrain_gpt writes (the
# memory plan, training intervals, validations, the final test, an interval of only skipped
# steps): each curve gets exactly its own points, in order, and the validation curve is drawn.
#   plot_loss_test.sh SOURCE_DIR PYTHON
set -euo pipefail
SRC=$1 PY=$2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > $W/metrics.jsonl <<'JSONL'
{"memory_plan": {"zero_stage": 0, "world_size": 1}}
{"iteration": 2, "consumed_samples": 8, "lm_loss": 8.5, "lr": 0.001, "grad_norm": 1.3}
{"iteration": 4, "consumed_samples": 16, "lm_loss": 7.5, "lr": 0.001, "grad_norm": 1.2}
{"iteration": 4, "consumed_samples": 16, "split": "valid", "lm_loss": 7.9, "ppl": 2697.3}
{"iteration": 6, "consumed_samples": 24, "lm_loss": null, "lr": 0.001, "grad_norm": null}
{"iteration": 8, "consumed_samples": 32, "lm_loss": 6.5, "lr": 0.0005, "grad_norm": 1.0}
{"iteration": 8, "consumed_samples": 32, "split": "valid", "lm_loss": 7.1, "ppl": 1211.9}
{"iteration": 8, "consumed_samples": 32, "split": "test", "lm_loss": 7.0, "ppl": 1096.6}
JSONL
out=$("$PY" "$SRC/scripts/plot_loss.py" $W/metrics.jsonl $W/loss.svg)
[[ $out == *": 3 training points, 2 validation points" ]] || { echo "FAIL: $out"; exit 1; }
# The training path has 3 points (M + 2 L), the validation path 2 (M + 1 L) and its 2 markers.
"$PY" - "$W/loss.svg" <<'PYCHECK'
import re, sys
svg = open(sys.argv[1]).read()
paths = re.findall(r'<path d="([^"]*)" fill="none" stroke="(#[0-9a-f]+)"', svg)
points = {color: len(re.findall(r"[ML]", d)) for d, color in paths}
assert points == {"#1f77b4": 3, "#d62728": 2}, points
assert svg.count('<circle') == 2, svg.count('<circle')
PYCHECK
echo "plot_loss ok"
