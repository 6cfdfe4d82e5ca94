grep -q '"docs_written_text": 1000' "$1/stats.json" && grep -q '"tokens_text": 1361845' "$1/stats.json"
