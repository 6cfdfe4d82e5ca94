// What the GPU's speed depends on, checked where it can be without one: how a
// collective is waited for, and the shape of the block's autograd graph.
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <set>

#include "trainer/model/gpt2_model.h"
#include "trainer/parallel/comm.h"

namespace zlm::trainer {
namespace {

// A c10d operation that records how it was waited for.
class RecordingWork : public c10d::Work {
 public:
  bool wait(std::chrono::milliseconds timeout) override {
    waited_with = timeout;
    ++waits;
    return true;
  }
  std::chrono::milliseconds waited_with{-1};
  int waits = 0;
};

// NCCL: the stream waits (c10d's kNoTimeout, which ProcessGroupNCCL turns into a
// stream wait on its end event); Gloo: the host, bounded by the timeout.
TEST(CollectiveWait, NcclWaitsOnTheStreamGlooOnTheHost) {
  EXPECT_EQ(wait_policy("nccl"), WaitOn::Stream);
  EXPECT_EQ(wait_policy("gloo"), WaitOn::Host);
  auto nccl = c10::make_intrusive<RecordingWork>();
  wait_work(*nccl, wait_policy("nccl"), std::chrono::minutes(10));
  EXPECT_EQ(nccl->waits, 1);
  EXPECT_EQ(nccl->waited_with, ::kNoTimeout);
  auto gloo = c10::make_intrusive<RecordingWork>();
  wait_work(*gloo, wait_policy("gloo"), std::chrono::minutes(10));
  EXPECT_EQ(gloo->waited_with, std::chrono::milliseconds(600000));
}

void collect(const std::shared_ptr<torch::autograd::Node>& node, std::set<torch::autograd::Node*>& seen, std::multiset<std::string>& names) {
  if (!node || !seen.insert(node.get()).second) return;
  names.insert(node->name());
  for (const auto& edge : node->next_edges()) collect(edge.function, seen, names);
}

// One block's backward graph: q, k and v come from one unbind (one gradient
// buffer, no select_backward zero-filling three), and on one TP rank the
// four linear layers are each one GEMM that adds its bias (AddmmBackward0).
TEST(BlockGraph, QkvIsUnboundAndTheProjectionsCarryTheirBias) {
  torch::manual_seed(1);
  Gpt2Config c{.vocab_size = 64, .max_positions = 16, .num_layers = 1, .hidden = 32, .heads = 4, .hidden_dropout = 0, .attention_dropout = 0};
  TensorParallel tp;
  Gpt2Block block(c, &tp, ParamInit::Empty);
  for (auto& p : block->parameters()) p.data().normal_(0, 0.02);
  auto x = torch::randn({2, 8, 32}, torch::requires_grad());
  auto y = block->forward(x);
  std::set<torch::autograd::Node*> seen;
  std::multiset<std::string> names;
  collect(y.grad_fn(), seen, names);
  std::string all;
  for (const auto& n : names) all += n + " ";
  EXPECT_EQ(names.count("SelectBackward0"), 0u) << all;
  EXPECT_EQ(names.count("UnbindBackward0"), 1u) << all;
  EXPECT_EQ(names.count("AddmmBackward0"), 4u) << all;  // qkv, proj, fc, proj: one GEMM each, with its bias
  EXPECT_EQ(names.count("MmBackward0"), 0u) << all;
}

}  // namespace
}  // namespace zlm::trainer
