// DeepSpeed checkpoint reading (trainer/checkpoint/deepspeed_format.h) on
// damaged files built here: a model file without its module, an optimizer file
// without its state; and Megatron's rng_state (megatron_format.h) read back and
// damaged, and the distributed optimizer's layout. The errors name the file, not only the missing key. (The reference
// tests read and write real ones with DeepSpeed and megatron-core themselves.)
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/core/error.h"
#include "trainer/checkpoint/deepspeed_format.h"
#include "trainer/checkpoint/megatron_format.h"
#include "trainer/checkpoint/torch_pickle.h"

namespace zlm::trainer {
namespace {

namespace fs = std::filesystem;

// A checkpoint directory with `latest` naming global_step1; returns the tag directory.
fs::path tag_dir(const fs::path& root) {
  fs::create_directories(root / "global_step1");
  std::ofstream(root / "latest") << "global_step1";
  return root / "global_step1";
}

PyValue model_states(bool with_module, bool with_shapes) {
  Gpt2Config c;
  c.vocab_size = 128, c.max_positions = 8, c.num_layers = 1, c.hidden = 8, c.heads = 2;
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  top.entries.emplace_back(py_str("iteration"), py_int(1));
  top.entries.emplace_back(py_str("args"), megatron_args(MegatronPart{.config = c}));
  if (with_module) top.entries.emplace_back(py_str("module"), py_dict());
  if (with_shapes) {
    auto shapes = py_list();
    shapes->items.push_back(py_dict());
    top.entries.emplace_back(py_str("param_shapes"), shapes);
  }
  return top;
}

std::string error_of(const fs::path& dir) {
  try {
    read_deepspeed_model(dir.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepSpeedFormat, AMissingEntryNamesItsFile) {
  const fs::path root = fs::temp_directory_path() / ("zlm_ds_" + std::to_string(getpid()));
  const fs::path tag = tag_dir(root);
  const fs::path model = tag / "mp_rank_00_model_states.pt";
  save_torch_file(model.string(), model_states(false, false));
  std::string said = error_of(root);
  EXPECT_NE(said.find(model.string()), std::string::npos) << said;
  EXPECT_NE(said.find("'module'"), std::string::npos) << said;

  save_torch_file(model.string(), model_states(true, true));  // ZeRO 1-2: the partitions hold the weights
  const fs::path optim = tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt";
  save_torch_file(optim.string(), *py_dict());
  said = error_of(root);
  EXPECT_NE(said.find(optim.string()), std::string::npos) << said;
  EXPECT_NE(said.find("'optimizer_state_dict'"), std::string::npos) << said;
  for (const fs::path& f : {optim, model, root / "latest"}) fs::remove(f);  // not remove_all (libtorch's copy)
  fs::remove(tag);
  fs::remove(root);
}

std::string rng_error_of(const PyValue& part) {
  try {
    read_megatron_rng(part, "iter_0000005/mp_rank_01/model_optim_rng.pt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronFormat, RngStateReadsBackAndADamagedOneNamesItsFile) {
  PartRng streams;
  streams.cpu = torch::arange(5056).to(torch::kUInt8);
  streams.cpu_tracker = torch::arange(7, 5063).to(torch::kUInt8);
  PyValue part;
  part.kind = PyValue::Kind::Dict;
  part.entries.emplace_back(py_str("rng_state"), megatron_rng_state(streams, 1234, 1));
  part.entries.emplace_back(py_str("zerolm_rng_tracker"), py_tensor(streams.cpu_tracker));
  const PartRng back = read_megatron_rng(part, "f");
  EXPECT_TRUE(torch::equal(back.cpu, streams.cpu));
  EXPECT_TRUE(torch::equal(back.cpu_tracker, streams.cpu_tracker));
  // A CPU run's CUDA states are its seeds' (megatron-core's: + 2718 + TP rank for the tracker), offset 0.
  ASSERT_EQ(back.tracker.numel(), 16);
  uint64_t seed = 0, offset = 1;
  std::memcpy(&seed, back.tracker.data_ptr<uint8_t>(), 8);
  std::memcpy(&offset, back.tracker.data_ptr<uint8_t>() + 8, 8);
  EXPECT_EQ(seed, 1234u + 2718u + 1u);
  EXPECT_EQ(offset, 0u);
  std::memcpy(&seed, back.device.data_ptr<uint8_t>(), 8);
  EXPECT_EQ(seed, 1234u);

  PyValue& dict = *part.entries[0].second->items[0];
  for (auto& [k, v] : dict.entries)
    if (k->s == "torch_rng_state") v = py_str("not a state");
  std::string said = rng_error_of(part);
  EXPECT_NE(said.find("mp_rank_01/model_optim_rng.pt"), std::string::npos) << said;
  EXPECT_NE(said.find("torch_rng_state"), std::string::npos) << said;
  part.entries[0].second = py_int(3);
  said = rng_error_of(part);
  EXPECT_NE(said.find("rng_state is a"), std::string::npos) << said;

  PyValue none;  // a file without RNG state (--no-save-rng, a converted model): nothing to restore
  none.kind = PyValue::Kind::Dict;
  EXPECT_FALSE(read_megatron_rng(none, "f").cpu.defined());
}

// megatron-core's gradient buffer, worked by hand from its rules: backwards, each parameter at a
// multiple of 64; a bucket closed by size or around a pipeline's embedding copy loses its tail.
TEST(MegatronFormat, DistributedOptimizerLayoutFollowsTheGradientBuffer) {
  using Params = std::vector<std::pair<std::string, int64_t>>;
  auto layout = [](const Params& p, bool pipelined, int64_t bucket) { return megatron_distributed_optimizer_layout(p, pipelined, bucket); };
  const Params plain{{"a", 10}, {"b", 100}, {"c", 5}};
  DistributedOptimizerLayout l = layout(plain, false, 0);  // c 0..5, b 64..164, a 192..202
  EXPECT_EQ(l.offset, (std::vector<int64_t>{192, 64, 0}));
  EXPECT_EQ(l.numel, 202);
  // The last stage: the output layer's bucket first (10 numbers), then the rest from 10, not 64.
  const Params last{{"x", 5}, {"y", 100}, {"output_layer.weight", 10}};
  l = layout(last, true, 0);
  EXPECT_EQ(l.offset, (std::vector<int64_t>{138, 10, 0}));
  EXPECT_EQ(l.numel, 143);
  EXPECT_EQ(layout(last, false, 0).offset, (std::vector<int64_t>{192, 64, 0}));  // one stage: one bucket
  // The first stage: the open bucket ends at the embedding's aligned start (192), which it keeps.
  const Params first{{"embedding.word_embeddings.weight", 10}, {"x", 100}, {"y", 5}};
  l = layout(first, true, 0);
  EXPECT_EQ(l.offset, (std::vector<int64_t>{192, 64, 0}));
  EXPECT_EQ(l.numel, 202);
  // Buckets of 150: c (0..100) and b (128..228) fill the first; a starts the second at 228.
  const Params even{{"a", 100}, {"b", 100}, {"c", 100}};
  l = layout(even, false, 150);
  EXPECT_EQ(l.offset, (std::vector<int64_t>{228, 128, 0}));
  EXPECT_EQ(l.numel, 328);
}

}  // namespace
}  // namespace zlm::trainer
