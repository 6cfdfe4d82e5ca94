// DeepSpeed's JSON config (`--deepspeed --deepspeed_config ds.json`, as in the
// Megatron-DeepSpeed tutorials) applied to pretrain_gpt's arguments:
//   train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
//       -> --global-batch-size / --micro-batch-size (must agree with the flags
//          and with micro * accumulation * world size, as DeepSpeed asserts)
//   gradient_clipping -> --clip-grad
//   zero_optimization.stage -> --zero-stage; cpu_offload (old form) or
//       offload_optimizer.device "cpu" -> --cpu-offload; offload_param.device
//       "cpu" (or the old cpu_offload_params) -> --offload-params;
//       sub_group_size -> elements per CPU AdamW chunk
//   fp16 {enabled, loss_scale, initial_scale_power, loss_scale_window,
//       hysteresis, min_loss_scale} -> --fp16 and Megatron's scaler flags
//   bf16 {enabled} -> --bf16
//   optimizer {type Adam/AdamW, params lr, betas, eps, weight_decay}
// Keys that only tune DeepSpeed's own machinery (bucket sizes, overlap_comm,
// stage3 prefetch and persistence knobs, logging) are accepted and reported as
// notes saying what zerolm does instead; any other key is an error naming it.
// Read as Python reads it (a repeated key keeps its last value) through
// trainer/json_object.h: invalid JSON is named by line and column.
#pragma once

#include <string>
#include <vector>

#include "trainer/megatron_args.h"

namespace zlm::trainer {

struct DeepSpeedSettings {
  int64_t offload_chunk = 0;        // sub_group_size, 0 = default
  std::vector<std::string> notes;   // what was accepted without effect, and why
};

// Reads `path` and updates `a`. Throws zlm::Error naming the file and the key.
DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, const std::string& path, int dp_size);

bool deepspeed_config_supported();

}  // namespace zlm::trainer
