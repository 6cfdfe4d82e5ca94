// pretrain_gpt's settings, assembled by one pipeline and then frozen:
//
//   TrainArgs flags = parse_megatron_args(argc, argv);         // the command line as given (megatron_args.h)
//   TrainConfig cfg = make_train_config(flags, world_size);    // + --model-config, + DeepSpeed's JSON, checked
//
// make_train_config merges, in this order: the flags; a Hugging Face config
// (--model-config: the model's shape); DeepSpeed's JSON (--deepspeed_config:
// ZeRO, precision, batch sizes, optimizer). A setting given both on the command
// line and in a file must have the same value in both (an error naming both
// otherwise). Then every rule is checked once, on the merged values, and an
// error names where the offending value came from ("--clip-grad -1",
// "ds.json: gradient_clipping -1"). Last, what follows from the settings is
// derived once: the ZeRO plan (what is sharded and offloaded: code outside
// this folder never compares stage numbers), the data-parallel size, the
// micro-batches per step.
//
// Torch-free. Reads the JSON files named by the flags (zlm::Error naming the
// file and key when they are wrong) and looks GPT-2's bundled vocab.json up
// when --vocab-file is not given.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/config/megatron_args.h"
#include "trainer/config/origins.h"

namespace zlm::trainer {

enum class ZeroStage { kReplicated = 0, kShardedOptimizer = 1, kShardedGradients = 2, kShardedParameters = 3 };

// What ZeRO shards over the data-parallel ranks and where its state lives.
struct ZeroPlan {
  ZeroStage stage = ZeroStage::kReplicated;
  bool shard_optimizer = false;   // each rank steps its range of every bucket (stages 1-3)
  bool shard_gradients = false;   // reduced gradients exist only as the rank's shard (stages 2, 3)
  bool shard_parameters = false;  // parameters exist only as shards, gathered around each use (stage 3)
  bool offload_optimizer = false;   // fp32 master weights, Adam moments and gradient shards in CPU memory
  bool offload_parameters = false;  // stage 3: the parameter shards in CPU memory too
  int64_t delayed_update_after = -1;  // with offload: steps after this many are delayed updates; -1: none
  int number() const { return static_cast<int>(stage); }  // for logs and files, never for decisions
};

// The plan of a stage (what it shards) with the given offloads.
ZeroPlan zero_plan(ZeroStage stage, bool offload_optimizer = false, bool offload_parameters = false, int64_t delayed_update_after = -1);

struct TrainConfig {
  TrainArgs args;  // every setting after the merge (the trainer reads, never writes)
  ZeroPlan zero;
  int world_size = 1, data_parallel = 1;
  int64_t micro_batches = 1;  // per step on each data-parallel rank: global batch / (micro batch x DP)
  int64_t offload_chunk = 0;  // elements per CPU AdamW chunk (DeepSpeed's sub_group_size); 0: the engine's default
  Origins origins;
  std::vector<std::string> notes;     // accepted settings that zerolm handles its own way (logged at start)
  std::vector<std::string> warnings;  // settings read otherwise than the reference would (logged at start)
  std::string deepspeed_summary;      // what DeepSpeed's JSON set, for the start-up log ("" without one)
};

// The pipeline above, for a run of `world_size` ranks. Throws zlm::Error
// (Usage for a setting, Format/Io for a file that cannot be read).
TrainConfig make_train_config(const TrainArgs& flags, int world_size);

// The tensor x pipeline x data-parallel layout of `a` on `world` ranks (part of
// make_train_config): a clear error naming the numbers when the world, the
// layers, the heads, the sequence or the batch do not divide.
void check_parallel_layout(const TrainArgs& a, int world);
// The data-parallel size: `world` ranks cut into --tensor-model-parallel-size x
// --pipeline-model-parallel-size groups. The one place it is derived; a usage
// error naming the flags when the sizes are not positive or do not divide.
int data_parallel_size(const TrainArgs& a, int world);

}  // namespace zlm::trainer
