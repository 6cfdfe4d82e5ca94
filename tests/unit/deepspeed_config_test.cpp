#include "trainer/deepspeed_config.h"

#include <fstream>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

class DeepSpeedConfig : public ::testing::Test {
 protected:
  TrainArgs base() {
    TrainArgs a;
    a.micro_batch_size = 4;
    a.global_batch_size = 4;  // what the parser leaves when --global-batch-size is not given
    return a;
  }
  DeepSpeedSettings apply(TrainArgs& a, const std::string& text, int world = 2) {
    std::ofstream(path_) << text;
    return apply_deepspeed_config(a, path_, world);
  }
  // A directory of its own: ctest runs the tests of this fixture in parallel
  // processes, and a shared file name let one remove the other's config.
  test::TempDir dir_;
  std::string path_ = dir_.path("ds_config.json");
};

// The Megatron-DeepSpeed tutorial's config, in its older form (cpu_offload) and the current one.
TEST_F(DeepSpeedConfig, TutorialConfigs) {
  ASSERT_TRUE(deepspeed_config_supported()) << "the data tools' build has simdjson";
  TrainArgs a = base();
  auto s = apply(a, R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
      "gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "cpu_offload": true, "reduce_bucket_size": 50000000,
      "overlap_comm": true}, "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
      "min_loss_scale": 1, "initial_scale_power": 12}, "wall_clock_breakdown": true})");
  EXPECT_EQ(a.zero_stage, 2);
  EXPECT_TRUE(a.cpu_offload);
  EXPECT_EQ(a.global_batch_size, 16);
  EXPECT_TRUE(a.fp16);
  EXPECT_EQ(a.initial_loss_scale, 4096.0);
  EXPECT_EQ(a.loss_scale_window, 500);
  EXPECT_EQ(s.notes.size(), 4u);  // steps_per_print, wall_clock_breakdown, reduce_bucket_size, overlap_comm

  TrainArgs b = base();
  apply(b, R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu"}, "sub_group_size": 1000000}})");
  EXPECT_EQ(b.global_batch_size, 24);  // 4 * 3 * 2 ranks
  EXPECT_EQ(b.zero_stage, 3);
  EXPECT_TRUE(b.cpu_offload && b.offload_params && b.bf16);
}

TEST_F(DeepSpeedConfig, ErrorsNameTheKey) {
  ASSERT_TRUE(deepspeed_config_supported()) << "the data tools' build has simdjson";
  TrainArgs a = base();
  EXPECT_ZLM_ERROR(apply(a, R"({"zero_optimization": {"stage": 2, "overlap_com": true}})"), ErrorKind::Usage,
                   "zero_optimization.overlap_com: not a setting zerolm knows");
  EXPECT_ZLM_ERROR(apply(a, R"({"zero_optimization": {"stage": 5}})"), ErrorKind::Usage, "zero_optimization.stage: must be 0, 1, 2 or 3");
  EXPECT_ZLM_ERROR(apply(a, R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})"), ErrorKind::Usage,
                   "offload_optimizer.device: 'nvme' is not supported");
  EXPECT_ZLM_ERROR(apply(a, R"({"train_micro_batch_size_per_gpu": 2})"), ErrorKind::Usage, "disagrees with --micro-batch-size 4");
  EXPECT_ZLM_ERROR(apply(a, R"({"train_batch_size": 16, "gradient_accumulation_steps": 3})"), ErrorKind::Usage,
                   "train_batch_size 16 != micro batch 4 * accumulation 3 * data-parallel size 2");
  EXPECT_ZLM_ERROR(apply(a, R"({"optimizer": {"type": "Lamb"}})"), ErrorKind::Usage, "optimizer.type: 'Lamb'");
  EXPECT_ZLM_ERROR(apply(a, "{\"fp16\": {\"enabled\": tru}}"), ErrorKind::Format, "not valid JSON at line 1, column 22");
  EXPECT_ZLM_ERROR(apply(a, "{\"zero_optimization\": {\"stage\": 2,\n  \"overlap_comm\": true,\n}}"), ErrorKind::Format,
                   "not valid JSON at line 3, column 1");
  EXPECT_ZLM_ERROR(apply(a, R"({"gradient_clipping": "1.0"})"), ErrorKind::Usage, "gradient_clipping: must be a number");
  EXPECT_ZLM_ERROR(apply(a, R"({"optimizer": {"params": {"betas": [0.9]}}})"), ErrorKind::Usage, "optimizer.params.betas: must be");
  EXPECT_ZLM_ERROR(apply(a, R"({"bf16": {"enabled": 1}})"), ErrorKind::Usage, "bf16.enabled: must be true or false");
  EXPECT_ZLM_ERROR(apply(a, R"([1, 2])"), ErrorKind::Format, "the top level must be a JSON object");
}

}  // namespace
}  // namespace zlm::trainer
