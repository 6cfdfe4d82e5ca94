grep -q '"ids_to_remove": 5' $1/stats.json
