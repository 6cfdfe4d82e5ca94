#include "trainer/config/hf_config.h"

#include <cmath>
#include <set>

#include "common/core/error.h"
#include "trainer/config/json_object.h"

namespace zlm::trainer {

namespace {

// transformers' PretrainedConfig attributes that every config may carry and that
// do not change the trained function (generation, labels, provenance, output switches).
const std::set<std::string>& generic_keys() {
  static const std::set<std::string> s = {
      "architectures", "bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "task_specific_params", "use_cache",
      "transformers_version", "torch_dtype", "dtype", "_name_or_path", "_commit_hash", "_attn_implementation", "attn_implementation",
      "gradient_checkpointing", "output_past", "id2label", "label2id", "num_labels", "_num_labels", "problem_type", "finetuning_task",
      "tokenizer_class", "prefix", "is_decoder", "return_dict", "output_hidden_states", "output_attentions", "use_return_dict",
      "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward", "max_length", "min_length",
      "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
      "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
      "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
      // GPT2Config's own that do not change the model: the task heads' summary, the tokenizer, attention's upcast order
      "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "n_special",
      "predict_special_tokens", "reorder_and_upcast_attn"};
  return s;
}

// The shape and the dropouts (GPT2Config's defaults for what is missing), bounded.
void read_shape(const JsonObjectView& cfg, HfGpt2Config& c) {
  auto bounded = [&](const char* key, int64_t& field, int64_t lo, int64_t hi) {
    if (!cfg.has(key)) return;
    field = cfg.integer(key);
    if (field < lo || field > hi) cfg.fail(key, strprintf("%ld is outside [%ld, %ld]", (long)field, (long)lo, (long)hi));
  };
  bounded("vocab_size", c.vocab_size, 1, int64_t{1} << 24);
  bounded("n_positions", c.n_positions, 1, int64_t{1} << 20);
  bounded("n_layer", c.n_layer, 1, 1024);
  bounded("n_embd", c.n_embd, 1, 65536);
  bounded("n_head", c.n_head, 1, 1024);
  if (c.n_embd % c.n_head != 0) cfg.fail("n_embd", strprintf("%ld is not divisible by n_head %ld", (long)c.n_embd, (long)c.n_head));
  auto probability = [&](const char* key, double& field) {
    if (!cfg.has(key)) return;
    field = cfg.number(key);
    if (field < 0 || field >= 1) cfg.fail(key, strprintf("%g is not a dropout probability in [0, 1)", field));
  };
  probability("resid_pdrop", c.resid_pdrop);
  probability("attn_pdrop", c.attn_pdrop);
  probability("embd_pdrop", c.embd_pdrop);
  if (cfg.has("initializer_range")) {
    c.initializer_range = cfg.number("initializer_range");
    if (c.initializer_range <= 0) cfg.fail("initializer_range", "must be positive");
  }
  if (cfg.has("eos_token_id")) c.eos_token_id = cfg.is_null("eos_token_id") ? -1 : cfg.integer("eos_token_id");
}

// What would make another model than zerolm's GPT-2.
void refuse_other_models(const JsonObjectView& cfg, const HfGpt2Config& c) {
  if (cfg.has("n_ctx") && cfg.integer("n_ctx") != c.n_positions)
    cfg.fail("n_ctx", strprintf("%ld differs from n_positions %ld (zerolm has one context length)", (long)cfg.integer("n_ctx"), (long)c.n_positions));
  if (cfg.has("n_inner") && !cfg.is_null("n_inner") && cfg.integer("n_inner") != 4 * c.n_embd)
    cfg.fail("n_inner", strprintf("%ld: zerolm's MLP is 4 x n_embd (set n_inner to null or %ld)", (long)cfg.integer("n_inner"), (long)(4 * c.n_embd)));
  if (cfg.has("activation_function")) {
    const std::string act = cfg.string("activation_function");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast" && act != "gelu")
      cfg.fail("activation_function", "'" + act + "': zerolm trains GELU, tanh-approximated (gelu_new, Megatron's bias-GELU fusion) or "
               "exact (gelu, Megatron's --no-bias-gelu-fusion)");
  }
  if (cfg.has("layer_norm_epsilon") && std::fabs(cfg.number("layer_norm_epsilon") - 1e-5) > 1e-12)
    cfg.fail("layer_norm_epsilon", strprintf("%g: zerolm's LayerNorm uses 1e-5 (Megatron's and GPT-2's)", cfg.number("layer_norm_epsilon")));
  if (c.embd_pdrop != c.resid_pdrop)
    cfg.fail("embd_pdrop", strprintf("%g differs from resid_pdrop %g: zerolm (as Megatron's --hidden-dropout) has one dropout for "
                                     "embeddings and residuals", c.embd_pdrop, c.resid_pdrop));
  auto must_be = [&](const char* key, bool want, const char* why) {
    if (cfg.has(key) && cfg.boolean(key) != want) cfg.fail(key, std::string(want ? "false" : "true") + ": " + why);
  };
  must_be("scale_attn_weights", true, "zerolm scales attention scores by 1/sqrt(head size)");
  must_be("scale_attn_by_inverse_layer_idx", false, "zerolm does not scale attention by the layer index");
  must_be("tie_word_embeddings", true, "zerolm's output layer is the word embedding (tied)");
  must_be("add_cross_attention", false, "zerolm's GPT-2 is a decoder without cross-attention");
  must_be("is_encoder_decoder", false, "zerolm's GPT-2 is a decoder only");
  if (cfg.has("model_type") && cfg.string("model_type") != "gpt2") cfg.fail("model_type", "'" + cfg.string("model_type") + "' is not gpt2");
}

}  // namespace

HfGpt2Config read_hf_gpt2_config(const std::string& path) {
  const JsonObjectView cfg = read_json_object(path);  // transformers reads it with json.loads: a repeated key keeps its last value
  cfg.check_keys({"vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
                  "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "scale_attn_weights",
                  "scale_attn_by_inverse_layer_idx", "tie_word_embeddings", "add_cross_attention", "is_encoder_decoder", "model_type",
                  "eos_token_id"},
                 generic_keys());
  HfGpt2Config c;
  c.path = path;
  read_shape(cfg, c);
  refuse_other_models(cfg, c);
  c.erf_gelu = cfg.has("activation_function") && cfg.string("activation_function") == "gelu";
  return c;
}

}  // namespace zlm::trainer
