#!/usr/bin/env bash
# The torch_xla ZeRO-1 GPT2-XL tutorial as README.md translates it (block torch-xla-zero1): the model
# from a Hugging Face GPT2Config file, ZeRO-1 (--use-distributed-optimizer), bf16.
# Changes, all sizes and counts: config_1p5B_gpt2.json is the tutorial's file with n_layer 48->2,
# n_embd 1600->64, n_head 25->4, n_positions and n_ctx 1024->64 (every other field as published);
# --nproc-per-node 32->2, --global-batch-size 32->2, --train-iters 3000->6, --lr-warmup-iters 75->2,
# --log-interval 10->1; wikitext_text_document is 300 OpenWebText documents tokenized with GPT-2's
# own files (the config's vocab_size 50257 and eos_token_id 50256 are GPT-2's).
# Checks: the shape comes from the file (the parameter count is GPT-2's formula for it), ZeRO-1
# over 2 ranks, losses start at about ln(50257); and the refusals: a field zerolm does not train
# (erf GELU, another LayerNorm epsilon, untied embeddings), a flag that disagrees with the file,
# a vocabulary the file does not describe, an unknown field.
#   torch_xla_zero1.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
source "$(dirname "$0")/common.sh"
head -300 $DATA/megatron/openwebtext-1000.decoded.jsonl > wiki.jsonl
preprocess_data --input wiki.jsonl --output-prefix wikitext --tokenizer-type GPT2BPETokenizer --append-eod -q
cat > config_1p5B_gpt2.json <<'JSON'
{
  "activation_function": "gelu_new",
  "architectures": [
    "GPT2LMHeadModel"
  ],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 64,
  "n_embd": 64,
  "n_head": 4,
  "n_layer": 2,
  "n_positions": 64,
  "output_past": true,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {
    "text-generation": {
      "do_sample": true,
      "max_length": 50
    }
  },
  "vocab_size": 50257
}
JSON
tutorial torch-xla-zero1 --flag --nproc-per-node 2 --flag --global-batch-size 2 --flag --train-iters 6 --flag --lr-warmup-iters 2 \
  --flag --log-interval 1
log=torch-xla-zero1.log
grep -q 'model from config_1p5B_gpt2.json: 2 layers, hidden 64, 4 heads, 64 positions' $log || fail "the shape did not come from the file"
# GPT-2's parameters: V h + P h + L (12 h^2 + 13 h) + 2 h, with V padded to 50304.
grep -q "number of parameters on this rank: $((50304 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64)) " $log ||
  fail "parameter count is not the config's model's"
grep -q 'ZeRO stage 1 over 2 data-parallel ranks' $log || fail "not ZeRO-1 over 2 ranks"
losses checkpoints/gpt2_xl/metrics.jsonl | "$PY" -c 'import math,sys
v = [float(l.split()[1]) for l in sys.stdin]
assert len(v) == 6 and all(math.isfinite(x) for x in v) and abs(v[0] - math.log(50257)) < 1.0, v' || fail "unexpected losses"

# Refusals, before any training (exit 2, naming the file and the field or flag).
base=(--model-config bad.json --micro-batch-size 1 --train-iters 1 --lr 0.00015 --data-path wikitext_text_document --split 100,0,0)
refused() {  # refused MESSAGE EDIT [FLAGS...]: bad.json = the config with the python EDIT applied
  local msg=$1 edit=$2
  shift 2
  "$PY" -c "import json; c = json.load(open('config_1p5B_gpt2.json')); $edit; json.dump(c, open('bad.json', 'w'))"
  local rc=0
  pretrain_gpt "${base[@]}" "$@" > refused.log 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat refused.log; fail "exit $rc, expected 2 (a usage error) for: $edit $*"; }
  grep -qF -- "$msg" refused.log || { cat refused.log; fail "expected '$msg' for: $edit $*"; }
}
refused "bad.json: activation_function: 'relu': zerolm trains GELU" "c['activation_function'] = 'relu'"
refused "the GELU flags disagree with bad.json's activation_function (gelu: exact)" "c['activation_function'] = 'gelu'" --openai-gelu
refused "bad.json: layer_norm_epsilon: 1e-06" "c['layer_norm_epsilon'] = 1e-6"
refused "bad.json: tie_word_embeddings: false" "c['tie_word_embeddings'] = False"
refused "bad.json: rotary: not a setting zerolm knows" "c['rotary'] = True"
refused "--num-layers 3 disagrees with bad.json's n_layer 2" "pass" --num-layers 3
refused "bad.json: vocab_size 50000 is neither the 50257 entries" "c['vocab_size'] = 50000"
echo "torch-xla-zero1: ok"
