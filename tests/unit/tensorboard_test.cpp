#include "trainer/report/tensorboard.h"
#include "trainer/config/settings.h"

#include <gtest/gtest.h>

#include <map>

#include "common/core/error.h"
#include "formats/tfevents.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

TrainArgs args(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> w = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
                                "--micro-batch-size", "4", "--train-iters", "10", "--lr", "0.001", "--data-path", "d",
                                "--vocab-file", "v.json", "--tensorboard-dir", dir};
  w.insert(w.end(), extra.begin(), extra.end());
  std::vector<const char*> argv{"pretrain_gpt"};
  for (auto& s : w) argv.push_back(s.c_str());
  return make_train_config(parse_megatron_args(static_cast<int>(argv.size()), argv.data()), 1).args;
}

// (tag, step) -> value, in the order written.
std::vector<std::tuple<std::string, int64_t, float>> read_back(const std::string& path) {
  std::vector<std::tuple<std::string, int64_t, float>> out;
  for (const auto& p : formats::read_tfrecords(path).payloads) {
    formats::Event e = formats::decode_event(p);
    for (const auto& [tag, v] : e.scalars) out.emplace_back(tag, e.step, v);
  }
  return out;
}

TrainingScalars sample() {
  TrainingScalars s{.iteration = 4, .consumed_samples = 32, .batch_size = 8, .world_size = 2, .learning_rate = 5e-4, .loss_scale = 1.0};
  s.loss = 6.5;
  s.grad_norm = 1.25;
  return s;
}

TEST(TensorBoardLog, MegatronsDefaultTags) {
  test::TempDir dir;
  std::string path;
  {
    TensorBoardLog tb(args(dir.path("tb"), {}));
    path = tb.path();
    EXPECT_TRUE(tb.due(4));
    tb.training(sample());
    tb.iteration_time(4, 0.5);  // only with --log-timers-to-tensorboard
    tb.evaluation("validation", 4, 32, 5.0);
    tb.evaluation("test", 10, 80, 4.0);
  }
  using T = std::tuple<std::string, int64_t, float>;
  const std::vector<T> want = {
      {"learning-rate", 4, 5e-4f}, {"learning-rate vs samples", 32, 5e-4f}, {"lm loss", 4, 6.5f},       {"lm loss vs samples", 32, 6.5f},
      {"loss-scale", 4, 1.0f},     {"loss-scale vs samples", 32, 1.0f},     {"grad-norm", 4, 1.25f},   {"grad-norm vs samples", 32, 1.25f},
      {"lm loss validation", 4, 5.0f}, {"lm loss validation vs samples", 32, 5.0f}, {"lm loss test", 10, 4.0f}, {"lm loss test vs samples", 80, 4.0f}};
  EXPECT_EQ(read_back(path), want);
}

TEST(TensorBoardLog, OptionalTagsFollowTheirFlags) {
  test::TempDir dir;
  std::string path;
  {
    TensorBoardLog tb(args(dir.path("tb"), {"--log-batch-size-to-tensorboard", "--log-world-size-to-tensorboard", "--log-timers-to-tensorboard",
                                            "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard",
                                            "--no-log-learning-rate-to-tensorboard", "--no-log-loss-scale-to-tensorboard",
                                            "--tensorboard-log-interval", "2"}));
    path = tb.path();
    EXPECT_FALSE(tb.due(3));
    EXPECT_TRUE(tb.due(4));
    TrainingScalars s = sample();
    s.grad_norm.reset();  // a skipped iteration
    s.num_zeros = 12;
    s.params_norm = 30.5;
    s.memory = TrainingScalars::Memory{1 << 20, 1 << 19, 7};
    tb.training(s);
    tb.iteration_time(4, 0.5);
    tb.evaluation("validation", 4, 32, 25.0);
  }
  std::map<std::string, std::pair<int64_t, float>> got;
  for (const auto& [tag, step, v] : read_back(path)) got[tag] = {step, v};
  std::map<std::string, std::pair<int64_t, float>> want = {
      {"batch-size", {4, 8.0f}}, {"batch-size vs samples", {32, 8.0f}}, {"lm loss", {4, 6.5f}}, {"lm loss vs samples", {32, 6.5f}},
      {"world-size", {4, 2.0f}}, {"world-size vs samples", {32, 2.0f}}, {"num-zeros", {4, 12.0f}}, {"num-zeros vs samples", {32, 12.0f}},
      {"params-norm", {4, 30.5f}}, {"params-norm vs samples", {32, 30.5f}}, {"mem-reserved-bytes", {4, 1048576.0f}},
      {"mem-allocated-bytes", {4, 524288.0f}}, {"mem-allocated-count", {4, 7.0f}}, {"iteration-time", {4, 0.5f}},
      {"lm loss validation", {4, 25.0f}}, {"lm loss validation vs samples", {32, 25.0f}},
      {"lm loss validation ppl", {4, static_cast<float>(std::exp(20.0))}},  // Megatron caps the exponent at 20
      {"lm loss validation ppl vs samples", {32, static_cast<float>(std::exp(20.0))}}};
  EXPECT_EQ(got, want);
}

// A directory that cannot be created stops the run at start with its name;
// flags out of range are usage errors.
TEST(TensorBoardLog, Errors) {
  test::TempDir dir;
  test::spit(dir.path("file"), "x");
  EXPECT_ZLM_ERROR(TensorBoardLog(args(dir.path("file/tb"), {})), ErrorKind::Io, "file/tb");
  EXPECT_ZLM_ERROR(args("tb", {"--tensorboard-log-interval", "0"}), ErrorKind::Usage, "--tensorboard-log-interval");
  EXPECT_ZLM_ERROR(args("tb", {"--tensorboard-queue-size", "-1"}), ErrorKind::Usage, "--tensorboard-queue-size");
}

}  // namespace
}  // namespace zlm::trainer
