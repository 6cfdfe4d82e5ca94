grep -q '"docs_removed": 4' $1/stats.json && grep -q '"docs_bad": 1' $1/stats.json
