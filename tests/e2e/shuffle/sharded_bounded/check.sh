# The sharded shuffle within tight limits gives the one-machine shuffle's bytes:
# 64 buckets under an open-file limit of 100 (both soft and hard: scatter reads
# each part in two passes) and gathers in sorted runs under --memory-mb 0.1 (a
# bucket is about 75 KB); the one-machine shuffle under the same limits too, and
# with its default --memory-mb of 1024 under a 1 GB address-space limit
# (ulimit -v: a sorter reserves what its input needs, not its whole budget).
OUT=$1 BIN=$2 DATA=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p $OUT/parts && split -n l/3 -d --additional-suffix=.jsonl $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/parts/p || exit 1
(
  ulimit -n 100
  S=(--parts $OUT/parts --work $OUT/w --buckets 64 --seed 7 -q)
  $BIN/shuffle --sharded count "${S[@]}" && $BIN/shuffle --sharded scatter "${S[@]}" --stats-out $OUT/s.json &&
    $BIN/shuffle --sharded gather "${S[@]}" --bucket-dir $OUT/b --memory-mb 0.1 --stats-out $OUT/g.json || fail "shuffle --sharded under ulimit -n 100"
  $BIN/shuffle --seed 7 --memory-mb 0.1 $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/small.jsonl -q || fail "shuffle --memory-mb 0.1 under ulimit -n 100"
  ulimit -v 1000000
  $BIN/shuffle --seed 7 $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/as.jsonl -q || fail "shuffle under ulimit -v 1000000"
) || exit 1
cmp $OUT/as.jsonl $OUT/one.jsonl || fail "ulimit -v changed the one-machine shuffle"
grep -q '"scatter_passes": 6,' $OUT/s.json || fail "not 2 passes per part: $(cat $OUT/s.json)"
grep -Eq '"gather_runs": [1-9][0-9]+,' $OUT/g.json || fail "no gather in runs: $(cat $OUT/g.json)"
cat $OUT/b/bucket-*.jsonl | cmp - $OUT/one.jsonl || fail "the buckets in order differ from the one-machine shuffle"
cmp $OUT/small.jsonl $OUT/one.jsonl || fail "--memory-mb 0.1 changed the one-machine shuffle"
[[ -z "$(ls $OUT | grep -E 'bucket|run')" && -z "$(find $OUT/w -name '*.run*')" ]] || fail "temporary files left: $(ls $OUT)"
