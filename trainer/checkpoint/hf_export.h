// Hugging Face GPT2LMHeadModel export/import (config.json + model.safetensors).
//
// Layout: transformer.wte.weight (V, C) — the vocabulary unpadded back to the
// tokenizer's size —, transformer.wpe.weight (P, C), per layer i
// transformer.h.{i}.ln_1/ln_2.{weight,bias}, attn.c_attn.{weight (C, 3C), bias},
// attn.c_proj.{weight (C, C), bias}, mlp.c_fc.{weight (C, 4C), bias},
// mlp.c_proj.{weight (4C, C), bias} (HF's Conv1D stores (in, out), the transpose
// of our Linear), transformer.ln_f.{weight,bias}; lm_head is tied to wte.
// safetensors: u64 LE header length, JSON header {name: {dtype, shape,
// data_offsets}}, then the raw little-endian float32 data.
#pragma once

#include <string>

#include "trainer/model/gpt2_model.h"

namespace zlm::trainer {

// Writes dir/config.json and dir/model.safetensors (atomically each).
void export_hf(Gpt2& model, int64_t vocab_size, const std::string& dir);

// Reads a GPT2LMHeadModel directory written by export_hf or by transformers'
// save_pretrained (float32 safetensors), padding the vocab to a multiple of
// `divisible_by`. Throws zlm::Error naming the file on a malformed input.
Gpt2 import_hf(const std::string& dir, int64_t divisible_by);

}  // namespace zlm::trainer
