# The stats file reports the merged counts.
grep -q '"datasets_in": 2' "$1/stats.json" && grep -q '"documents_out": 200' "$1/stats.json"
