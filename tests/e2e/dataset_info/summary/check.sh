grep -q '"integrity": "ok"' "$1/stats.json" && grep -q '"documents": 1000' "$1/stats.json"
