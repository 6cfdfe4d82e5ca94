#include "trainer/config/deepspeed_config.h"

#include <fstream>

#include "common/core/error.h"
#include "test_util.h"
#include "trainer/config/settings.h"

namespace zlm::trainer {
namespace {

// DeepSpeed's JSON merged into a command line through the whole settings pipeline.
class DeepSpeedConfig : public ::testing::Test {
 protected:
  TrainConfig run(const std::string& json, std::vector<std::string> extra = {}, int world = 2) {
    std::ofstream(path_) << json;
    std::vector<std::string> words = {"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "8",
                                      "--train-iters", "1", "--lr", "0.1", "--data-path", "d", "--vocab-file", "v",
                                      "--deepspeed", "--deepspeed_config", path_};
    words.insert(words.end(), extra.begin(), extra.end());
    std::vector<const char*> argv{"pretrain_gpt"};
    for (auto& w : words) argv.push_back(w.c_str());
    return make_train_config(parse_megatron_args(static_cast<int>(argv.size()), argv.data()), world);
  }
  // A directory of its own: ctest runs the tests of this fixture in parallel
  // processes, and a shared file name let one remove the other's config.
  test::TempDir dir_;
  std::string path_ = dir_.path("ds_config.json");
};

// The Megatron-DeepSpeed tutorial's config, in its older form (cpu_offload) and the current one.
TEST_F(DeepSpeedConfig, TutorialConfigs) {
  ASSERT_TRUE(deepspeed_config_supported()) << "the data tools' build has simdjson";
  const TrainConfig c = run(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
      "gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "cpu_offload": true, "reduce_bucket_size": 50000000,
      "overlap_comm": true}, "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
      "min_loss_scale": 1, "initial_scale_power": 12}, "wall_clock_breakdown": true})");
  const TrainArgs& a = c.args;
  EXPECT_EQ(a.zero_stage, 2);
  EXPECT_TRUE(c.zero.shard_gradients && c.zero.offload_optimizer && !c.zero.shard_parameters);
  EXPECT_EQ(a.global_batch_size, 16);
  EXPECT_TRUE(a.fp16);
  EXPECT_EQ(a.initial_loss_scale, 4096.0);
  EXPECT_EQ(a.loss_scale_window, 500);
  EXPECT_EQ(c.notes.size(), 4u);  // steps_per_print, wall_clock_breakdown, reduce_bucket_size, overlap_comm
  EXPECT_EQ(c.origins.describe("--zero-stage"), path_ + ": zero_optimization.stage 2");

  const TrainConfig b = run(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu"}, "sub_group_size": 1000000}})");
  EXPECT_EQ(b.args.global_batch_size, 24);  // 4 * 3 * 2 ranks
  EXPECT_EQ(b.args.zero_stage, 3);
  EXPECT_TRUE(b.args.cpu_offload && b.args.offload_params && b.args.bf16);
  EXPECT_EQ(b.offload_chunk, 1000000);
  // DeepSpeed 0.3's parameter offload key: the parameters only.
  const TrainConfig old = run(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "cpu_offload_params": true}})", {"--micro-batch-size", "4"});
  EXPECT_TRUE(old.args.offload_params);
  EXPECT_FALSE(old.args.cpu_offload);
}

TEST_F(DeepSpeedConfig, ErrorsNameTheKey) {
  ASSERT_TRUE(deepspeed_config_supported()) << "the data tools' build has simdjson";
  const std::vector<std::string> mbs = {"--micro-batch-size", "4"};
  EXPECT_ZLM_ERROR(run(R"({"zero_optimization": {"stage": 2, "overlap_com": true}})", mbs), ErrorKind::Usage,
                   "zero_optimization.overlap_com: not a setting zerolm knows");
  EXPECT_ZLM_ERROR(run(R"({"zero_optimization": {"stage": 5}})", mbs), ErrorKind::Usage, "zero_optimization.stage 5: must be 0, 1, 2 or 3");
  EXPECT_ZLM_ERROR(run(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})", mbs), ErrorKind::Usage,
                   "offload_optimizer.device: 'nvme' is not supported");
  EXPECT_ZLM_ERROR(run(R"({"train_micro_batch_size_per_gpu": 2})", mbs), ErrorKind::Usage,
                   "train_micro_batch_size_per_gpu: 2 disagrees with --micro-batch-size 4");
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 16, "gradient_accumulation_steps": 3})", mbs), ErrorKind::Usage,
                   "train_batch_size 16 != micro batch 4 * accumulation 3 * data-parallel size 2");
  EXPECT_ZLM_ERROR(run(R"({"optimizer": {"type": "Lamb"}})", mbs), ErrorKind::Usage, "optimizer.type: 'Lamb'");
  EXPECT_ZLM_ERROR(run("{\"fp16\": {\"enabled\": tru}}", mbs), ErrorKind::Format, "not valid JSON at line 1, column 22");
  EXPECT_ZLM_ERROR(run("{\"zero_optimization\": {\"stage\": 2,\n  \"overlap_comm\": true,\n}}", mbs), ErrorKind::Format,
                   "not valid JSON at line 3, column 1");
  EXPECT_ZLM_ERROR(run(R"({"gradient_clipping": "1.0"})", mbs), ErrorKind::Usage, "gradient_clipping: must be a number");
  EXPECT_ZLM_ERROR(run(R"({"optimizer": {"params": {"betas": [0.9]}}})", mbs), ErrorKind::Usage, "optimizer.params.betas: must be");
  EXPECT_ZLM_ERROR(run(R"({"bf16": {"enabled": 1}})", mbs), ErrorKind::Usage, "bf16.enabled: must be true or false");
  EXPECT_ZLM_ERROR(run(R"([1, 2])", mbs), ErrorKind::Format, "the top level must be a JSON object");
}

// One rule for a setting given both ways: the same value, or an error naming both; the JSON's
// values pass the flags' range checks; a repeated key is refused, as DeepSpeed's reader does.
TEST_F(DeepSpeedConfig, FlagsAndJsonAgreeOrAreRefused) {
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})", {"--micro-batch-size", "4", "--zero-stage", "2"}),
                   ErrorKind::Usage, "zero_optimization.stage: 1 disagrees with --zero-stage 2");
  EXPECT_EQ(run(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})", {"--micro-batch-size", "4", "--zero-stage", "2"}).args.zero_stage, 2);
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 0.5}}})", {"--micro-batch-size", "4"}), ErrorKind::Usage,
                   "optimizer.params.lr: 0.5 disagrees with --lr 0.1");
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 8, "gradient_clipping": -1})", {"--micro-batch-size", "4"}), ErrorKind::Usage,
                   "gradient_clipping -1: must not be negative");
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "stage": 2}})", {"--micro-batch-size", "4"}),
                   ErrorKind::Format, "zero_optimization.stage is given twice");
  EXPECT_ZLM_ERROR(run(R"({"train_batch_size": 8, "fp16": {"enabled": true}})", {"--micro-batch-size", "4", "--bf16"}), ErrorKind::Usage,
                   "fp16.enabled true and --bf16 are exclusive");
}

}  // namespace
}  // namespace zlm::trainer
