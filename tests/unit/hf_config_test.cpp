#include "trainer/config/hf_config.h"

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

// The torch_xla tutorial's config_1p5B_gpt2.json (AWS Neuron's zero1_gpt2 sample), as published.
constexpr const char* kGpt2Xl = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256,
  "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
  "n_ctx": 1024, "n_embd": 1600, "n_head": 25, "n_layer": 48, "n_positions": 1024, "output_past": true, "resid_pdrop": 0.1,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
  "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257})";

std::string with(const std::string& text, const std::string& from, const std::string& to) {
  std::string s = text;
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST(HfConfig, ReadsTheTutorialsGpt2Xl) {
  test::TempDir dir;
  test::spit(dir.path("c.json"), kGpt2Xl);
  const HfGpt2Config c = read_hf_gpt2_config(dir.path("c.json"));
  EXPECT_EQ(c.n_layer, 48);
  EXPECT_EQ(c.n_embd, 1600);
  EXPECT_EQ(c.n_head, 25);
  EXPECT_EQ(c.n_positions, 1024);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.eos_token_id, 50256);
  EXPECT_DOUBLE_EQ(c.resid_pdrop, 0.1);
  test::spit(dir.path("d.json"), "{}");  // every field missing: GPT2Config's defaults (GPT-2 small)
  const HfGpt2Config d = read_hf_gpt2_config(dir.path("d.json"));
  EXPECT_EQ(d.n_layer, 12);
  EXPECT_EQ(d.n_embd, 768);
  EXPECT_FALSE(c.erf_gelu);  // gelu_new: the tanh approximation
  test::spit(dir.path("e.json"), with(kGpt2Xl, "\"gelu_new\"", "\"gelu\""));
  EXPECT_TRUE(read_hf_gpt2_config(dir.path("e.json")).erf_gelu);  // exact GELU, as Megatron's --no-bias-gelu-fusion
}

TEST(HfConfig, RefusesAnotherModelNamingTheField) {
  test::TempDir dir;
  const std::string p = dir.path("c.json");
  auto refused = [&](const std::string& text, const char* needle) {
    test::spit(p, text);
    EXPECT_ZLM_ERROR(read_hf_gpt2_config(p), ErrorKind::Usage, needle);
  };
  refused(with(kGpt2Xl, "\"gelu_new\"", "\"relu\""), "activation_function: 'relu'");
  refused(with(kGpt2Xl, "1e-05", "1e-06"), "layer_norm_epsilon: 1e-06");
  refused(with(kGpt2Xl, "\"embd_pdrop\": 0.1", "\"embd_pdrop\": 0.2"), "embd_pdrop: 0.2 differs from resid_pdrop 0.1");
  refused(with(kGpt2Xl, "\"n_ctx\": 1024", "\"n_ctx\": 2048"), "n_ctx: 2048 differs from n_positions 1024");
  refused(with(kGpt2Xl, "\"n_head\": 25", "\"n_head\": 24"), "n_embd: 1600 is not divisible by n_head 24");
  refused(with(kGpt2Xl, "\"n_layer\": 48", "\"n_layer\": 100000"), "n_layer: 100000 is outside [1, 1024]");
  refused(with(kGpt2Xl, "\"model_type\": \"gpt2\"", "\"model_type\": \"gpt_neo\""), "model_type: 'gpt_neo' is not gpt2");
  refused(with(kGpt2Xl, "\"vocab_size\": 50257", "\"vocab_size\": 50257, \"tie_word_embeddings\": false"), "tie_word_embeddings: false");
  refused(with(kGpt2Xl, "\"vocab_size\": 50257", "\"vocab_size\": 50257, \"n_inner\": 1000"), "n_inner: 1000");
  refused(with(kGpt2Xl, "\"vocab_size\": 50257", "\"vocab_size\": 50257, \"rope_theta\": 10000"), "rope_theta: not a setting zerolm knows");
}

}  // namespace
}  // namespace zlm::trainer
