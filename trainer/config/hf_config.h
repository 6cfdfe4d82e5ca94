// A Hugging Face GPT2Config (config.json) as the model's shape: pretrain_gpt's
// --model-config (the torch_xla GPT2-XL tutorial trains from such a file) and
// convert_gpt --import-hf read it here, so both accept and refuse the same
// fields.
//
//   HfGpt2Config c = read_hf_gpt2_config("config_1p5B_gpt2.json");
//   // c.n_layer 48, c.n_embd 1600, c.n_head 25, c.n_positions 1024, ...
//
// Missing fields take GPT2Config's defaults (as transformers' from_json_file
// does). Fields that would make another model than zerolm's GPT-2 (pre-LN,
// learned positions, tied embeddings, tanh GELU, LayerNorm eps 1e-5, one
// dropout for embeddings and residuals) are refused naming the field and the
// value we train; fields that do not change the model (tokenizer ids, task
// heads' summary settings, caching, the transformers version) are accepted;
// anything else is an error naming it. Torch-free; needs simdjson
// (trainer/config/json_object.h).
#pragma once

#include <cstdint>
#include <string>

namespace zlm::trainer {

struct HfGpt2Config {
  std::string path;
  int64_t vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12;
  double resid_pdrop = 0.1, attn_pdrop = 0.1, embd_pdrop = 0.1;
  double initializer_range = 0.02;
  int64_t eos_token_id = 50256;  // -1 when the file gives null
  bool erf_gelu = false;          // activation_function "gelu" (exact); else a tanh approximation
};

// Throws zlm::Error(Usage) naming `path` and the field for values zerolm does
// not train, Format for a file that is not JSON. Sizes are bounded (n_layer
// <= 1024, n_embd <= 65536, ...) so that nothing absurd is allocated from them.
HfGpt2Config read_hf_gpt2_config(const std::string& path);

}  // namespace zlm::trainer
