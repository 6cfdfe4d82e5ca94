#include "trainer/config/megatron_args.h"
#include "trainer/config/settings.h"

#include <cmath>
#include <fstream>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

TrainArgs parse(std::vector<std::string> words) {
  std::vector<const char*> argv{"pretrain_gpt"};
  for (auto& w : words) argv.push_back(w.c_str());
  return parse_megatron_args(static_cast<int>(argv.size()), argv.data());
}

// The flags through the whole settings pipeline (merged and checked) for `world` ranks.
TrainArgs config(std::vector<std::string> words, int world = 1) { return make_train_config(parse(std::move(words)), world).args; }

// The Megatron tutorial command line (pretrain_gpt.py), unchanged.
std::vector<std::string> tutorial() {
  return {"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--num-layers", "24", "--hidden-size",
          "1024", "--num-attention-heads", "16", "--micro-batch-size", "4", "--global-batch-size", "8", "--seq-length", "1024",
          "--max-position-embeddings", "1024", "--train-iters", "5000", "--lr-decay-iters", "320000", "--save", "ckpt",
          "--load", "ckpt", "--data-path", "data_text_document", "--vocab-file", "gpt2-vocab.json", "--merge-file",
          "gpt2-merges.txt", "--data-impl", "mmap", "--split", "949,50,1", "--distributed-backend", "nccl", "--lr", "0.00015",
          "--lr-decay-style", "cosine", "--min-lr", "1.0e-5", "--weight-decay", "1e-2", "--clip-grad", "1.0",
          "--lr-warmup-fraction", ".01", "--checkpoint-activations", "--log-interval", "10", "--save-interval", "500",
          "--eval-interval", "100", "--eval-iters", "10", "--fp16"};
}

TEST(MegatronArgs, TutorialCommandParses) {
  TrainArgs a = config(tutorial());
  EXPECT_EQ(a.num_layers, 24);
  EXPECT_EQ(a.global_batch_size, 8);
  EXPECT_TRUE(a.fp16);
  EXPECT_TRUE(a.checkpoint_activations);
  EXPECT_EQ(a.data_path.size(), 1u);
  EXPECT_DOUBLE_EQ(a.warmup_samples(), 0.01 * 320000 * 8);
  EXPECT_EQ(a.valid_samples(), (5000 / 100 + 1) * 10 * 8);
  EXPECT_EQ(a.test_samples(), 80);
  EXPECT_DOUBLE_EQ(a.min_lr, 1e-5);
}

// Megatron's GELU switches: the fused bias-GELU (default) and --openai-gelu are tanh, the fusion off alone is erf.
TEST(MegatronArgs, GeluFlags) {
  TrainArgs a = config(tutorial());
  EXPECT_TRUE(a.bias_gelu_fusion);
  EXPECT_FALSE(a.openai_gelu);
  auto words = tutorial();
  words.push_back("--no-bias-gelu-fusion");
  EXPECT_FALSE(config(words).bias_gelu_fusion);
  words.push_back("--openai-gelu");
  EXPECT_TRUE(config(words).openai_gelu);
}

TEST(MegatronArgs, BlendedDataPath) {
  auto w = tutorial();
  auto it = std::find(w.begin(), w.end(), "data_text_document");
  *it = "0.3";
  w.insert(it + 1, {"A", "0.7", "B"});
  TrainArgs a = config(w);
  ASSERT_EQ(a.data_path.size(), 2u);
  EXPECT_EQ(a.data_path[1].second, "B");
  EXPECT_DOUBLE_EQ(a.data_path[0].first, 0.3);
}

TEST(MegatronArgs, ErrorsNameTheFlag) {
  auto w = tutorial();
  w.push_back("--no-such-flag");
  EXPECT_ZLM_ERROR(parse(w), ErrorKind::Usage, "unknown flag '--no-such-flag'");
  w = tutorial();
  w.push_back("--recompute-granularity");
  w.push_back("full");
  EXPECT_ZLM_ERROR(parse(w), ErrorKind::Usage, "--recompute-granularity is a Megatron flag that zerolm's pretrain_gpt does not support yet");
  w = tutorial();
  w[1] = "0";
  EXPECT_ZLM_ERROR(config(w), ErrorKind::Usage, "--tensor-model-parallel-size 0: must be at least 1");
  w = tutorial();
  w[5] = "24x";
  EXPECT_ZLM_ERROR(parse(w), ErrorKind::Usage, "--num-layers: '24x' is not an integer");
  w = tutorial();
  w.pop_back();
  w.push_back("--lr");
  EXPECT_ZLM_ERROR(parse(w), ErrorKind::Usage, "--lr needs a value");
}

TEST(MegatronArgs, LearningRateSchedule) {
  TrainArgs a = config(tutorial());
  const auto lr_after = [&](int64_t iterations) { return megatron_lr(a, iterations * a.global_batch_size); };
  EXPECT_DOUBLE_EQ(megatron_lr(a, 0), 0.0);
  EXPECT_DOUBLE_EQ(lr_after(1600), 0.00015 * 0.5);
  EXPECT_DOUBLE_EQ(lr_after(3200), 0.00015);
  double mid = lr_after(3200 + (320000 - 3200) / 2);
  EXPECT_NEAR(mid, 1e-5 + 0.5 * (0.00015 - 1e-5), 1e-12);
  EXPECT_DOUBLE_EQ(lr_after(400000), 1e-5);
  // A warm-up that ends inside an iteration, as megatron-core counts it (in samples): 1% of 150
  // iterations of 4 samples is 6 samples, an iteration and a half.
  a.global_batch_size = 4;
  a.lr_decay_iters = 150;
  EXPECT_DOUBLE_EQ(a.warmup_samples(), 6.0);
  EXPECT_DOUBLE_EQ(lr_after(1), 0.00015 * 4 / 6);
  EXPECT_DOUBLE_EQ(lr_after(2), 1e-5 + 0.5 * (std::cos(M_PI * 2.0 / 594.0) + 1.0) * (0.00015 - 1e-5));
  // --train-samples: the decay spans that many samples, not whole batches of them (1001 here).
  a.train_iters = 0, a.train_samples = 1001, a.lr_decay_iters = 0;
  EXPECT_EQ(a.decay_samples(), 1001);
  EXPECT_DOUBLE_EQ(a.warmup_samples(), 0.01 * 1001);
  EXPECT_GT(lr_after(250), 1e-5);  // 1000 samples: still decaying
  EXPECT_DOUBLE_EQ(lr_after(251), 1e-5);
}

}  // namespace
}  // namespace zlm::trainer

#include "trainer/zero/loss_scaler.h"

namespace zlm::trainer {
namespace {

TEST(LossScaler, DynamicBackoffHysteresisAndGrowth) {
  LossScaler s(1024, 1, /*window=*/3, /*hysteresis=*/2, true);
  s.update(true);  // first overflow: hysteresis 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // second: halves
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // hysteresis exhausted: halves again
  EXPECT_EQ(s.scale(), 256);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 256);
  s.update(false);  // third clean step in a row: doubles, hysteresis restored
  EXPECT_EQ(s.scale(), 512);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  LossScaler floor(2, 1, 1000, 1, true);
  for (int i = 0; i < 5; ++i) floor.update(true);
  EXPECT_EQ(floor.scale(), 1);
  LossScaler fixed(128, 1, 1, 1, false);
  fixed.update(true);
  fixed.update(false);
  EXPECT_EQ(fixed.scale(), 128);
}

// The tensor x pipeline x data layout: every impossible combination is refused
// before any work, naming the numbers.
TEST(MegatronArgs, ParallelLayout) {
  auto w = tutorial();  // 24 layers, 16 heads
  w[1] = "4";           // the Megatron-DeepSpeed tutorial: TP 4
  auto a = config(w, 4);
  EXPECT_EQ(a.tensor_model_parallel_size, 4);
  EXPECT_NO_THROW(check_parallel_layout(a, 4));
  EXPECT_NO_THROW(check_parallel_layout(a, 8));
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 6), ErrorKind::Usage, "6 ranks cannot form --tensor-model-parallel-size 4 x --pipeline-model-parallel-size 1");
  a.num_attention_heads = 6;
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 4), ErrorKind::Usage, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4");
  a = config(w, 4);
  a.tensor_model_parallel_size = 1;
  a.pipeline_model_parallel_size = 5;
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 5), ErrorKind::Usage, "--num-layers 24 is not divisible by --pipeline-model-parallel-size 5");
  a.pipeline_model_parallel_size = 2;
  for (int64_t z : {0, 1, 2, 3}) {  // every ZeRO stage on the data-parallel group of a pipeline
    a.zero_stage = z;
    EXPECT_NO_THROW(check_parallel_layout(a, 4));
  }
  a.zero_stage = 1;
  a.num_layers_per_virtual_pipeline_stage = 5;
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 2), ErrorKind::Usage, "--num-layers-per-virtual-pipeline-stage 5 does not divide the 12 layers");
  a.num_layers_per_virtual_pipeline_stage = 3;
  EXPECT_EQ(a.pipeline_chunks(), 4);
  a.global_batch_size = a.micro_batch_size * 3;
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 2), ErrorKind::Usage, "needs the 3 micro-batches per step");
  a.global_batch_size = a.micro_batch_size * 4;
  EXPECT_NO_THROW(check_parallel_layout(a, 2));
  for (int64_t z : {2, 3}) {  // and with the interleaved schedule
    a.zero_stage = z;
    EXPECT_NO_THROW(check_parallel_layout(a, 2));
  }
  a = config(w, 4);
  a.sequence_parallel = true;
  a.seq_length = 1026;
  EXPECT_ZLM_ERROR(check_parallel_layout(a, 4), ErrorKind::Usage, "--seq-length 1026 is not divisible by --tensor-model-parallel-size 4");
}

// One settings pipeline: a value given on the command line and in a file must agree, and the
// rules check the merged values, naming where each came from.
TEST(Settings, ModelConfigAgreesWithTheFlagsOrIsRefused) {
  test::TempDir dir;
  const std::string hf = dir.path("config.json");
  test::spit(hf, R"({"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64, "vocab_size": 50257})");
  std::vector<std::string> w = {"--micro-batch-size", "1", "--train-iters", "1", "--lr", "0.1", "--data-path", "d", "--model-config", hf};
  const TrainArgs a = config(w);
  EXPECT_EQ(a.num_layers, 2);
  EXPECT_EQ(a.seq_length, 64);  // n_positions, when --seq-length is not given
  w.insert(w.end(), {"--num-layers", "2", "--seq-length", "32"});
  EXPECT_EQ(config(w).seq_length, 32);  // the same value both ways is fine; a shorter sequence too
  w.insert(w.end(), {"--hidden-size", "128"});
  EXPECT_ZLM_ERROR(config(w), ErrorKind::Usage, "--hidden-size 128 disagrees with " + hf + "'s n_embd 64");
}

TEST(Settings, RulesNameTheOrigin) {
  EXPECT_ZLM_ERROR(config({"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "8", "--micro-batch-size", "1",
                           "--train-iters", "1", "--lr", "0.1", "--data-path", "d", "--clip-grad", "-1"}),
                   ErrorKind::Usage, "--clip-grad -1: must not be negative");
  EXPECT_ZLM_ERROR(config({"--hidden-size", "8"}), ErrorKind::Usage, "--num-layers is required");
  // Megatron's default global batch: a micro-batch on every data-parallel rank.
  std::vector<std::string> w = {"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "8",
                                "--micro-batch-size", "3", "--train-iters", "1", "--lr", "0.1", "--data-path", "d"};
  EXPECT_EQ(config(w, 4).global_batch_size, 12);
  auto with = [&](std::vector<std::string> extra) {
    auto all = w;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  EXPECT_ZLM_ERROR(config(with({"--use-distributed-optimizer", "--zero-stage", "0"})), ErrorKind::Usage,
                   "--zero-stage 0: contradicts --use-distributed-optimizer");
  EXPECT_EQ(config(with({"--zero-stage", "2", "--use-distributed-optimizer"})).zero_stage, 2);  // in any order
  EXPECT_ZLM_ERROR(config(with({"--offload-params", "--zero-stage", "2"})), ErrorKind::Usage,
                   "--offload-params: needs ZeRO stage 3, the only one that shards parameters (the stage is 2, from --zero-stage 2)");
  EXPECT_ZLM_ERROR(config(with({"--delayed-param-update"})), ErrorKind::Usage, "--delayed-param-update: needs --cpu-offload");
  EXPECT_ZLM_ERROR(config(with({"--fp16", "--bf16"})), ErrorKind::Usage, "--fp16 and --bf16 are exclusive");
  // The gradients' dtype, checked with the settings and named by where it came from.
  test::TempDir dir;
  const std::string ds = dir.path("ds.json");
  std::ofstream(ds) << R"({"train_micro_batch_size_per_gpu": 3, "communication_data_type": "fp16", "bf16": {"enabled": true}})";
  EXPECT_ZLM_ERROR(config(with({"--deepspeed", "--deepspeed_config", ds, "--bf16"})), ErrorKind::Usage,
                   "communication_data_type");
  EXPECT_ZLM_ERROR(config(with({"--deepspeed", "--deepspeed_config", ds, "--bf16"})), ErrorKind::Usage,
                   "gradients in fp16 with bf16 parameters");
  const TrainConfig c = make_train_config(parse(with({"--zero-stage", "3", "--cpu-offload", "--offload-params"})), 2);
  EXPECT_TRUE(c.zero.shard_optimizer && c.zero.shard_gradients && c.zero.shard_parameters && c.zero.offload_optimizer && c.zero.offload_parameters);
  EXPECT_EQ(c.data_parallel, 2);
  EXPECT_EQ(c.micro_batches, 1);
  EXPECT_EQ(c.zero.number(), 3);
}

// The second fault round's settings: each refused before any data or rank exists.
TEST(Settings, SecondRoundRefusals) {
  const std::vector<std::string> w = {"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "8",
                                      "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "1", "--lr", "0.1",
                                      "--data-path", "d"};
  auto with = [&](std::vector<std::string> extra) {
    auto all = w;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  EXPECT_ZLM_ERROR(config(with({"--split", "nan,1,1"})), ErrorKind::Usage, "'nan' is not a finite non-negative number");
  EXPECT_ZLM_ERROR(config(with({"--num-layers-per-virtual-pipeline-stage", "0"})), ErrorKind::Usage,
                   "--num-layers-per-virtual-pipeline-stage 0: must be at least 1");
  EXPECT_EQ(config(w).num_layers_per_virtual_pipeline_stage, 0);  // not given: no interleaving
  EXPECT_ZLM_ERROR(config(with({"--delayed-param-update-warmup", "2"})), ErrorKind::Usage, "has no effect without --delayed-param-update");
  EXPECT_ZLM_ERROR(config(with({"--make-vocab-size-divisible-by", "65537"})), ErrorKind::Usage, "must be between 1 and 65536");
  EXPECT_EQ(config(with({"--make-vocab-size-divisible-by", "65536"})).make_vocab_size_divisible_by, 65536);
  auto samples = w;
  samples[samples.size() - 6] = "--train-samples";  // in place of --train-iters 1
  samples[samples.size() - 5] = "3";
  EXPECT_ZLM_ERROR(config(samples), ErrorKind::Usage, "--train-samples 3: is less than one global batch (4 samples)");
  samples[samples.size() - 5] = "4";
  EXPECT_EQ(config(samples).total_iters(), 1);
}

}  // namespace
}  // namespace zlm::trainer
