// DeepSpeed's JSON config (`--deepspeed --deepspeed_config ds.json`, as in the
// Megatron-DeepSpeed tutorials) merged into pretrain_gpt's settings, one step of
// make_train_config (trainer/config/settings.h). A value the command line also
// gives must be the same in both (an error naming both otherwise); the merged
// values are range-checked afterwards, with the flags' rules, and errors name
// the JSON key. The keys and the flags they set:
//   train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
//       -> --global-batch-size / --micro-batch-size (train_batch_size =
//          micro * accumulation * data-parallel size, as DeepSpeed asserts)
//   gradient_clipping -> --clip-grad
//   zero_optimization.stage -> --zero-stage; cpu_offload (old form) or
//       offload_optimizer.device "cpu" -> --cpu-offload; offload_param.device
//       "cpu" (or the old cpu_offload_params) -> --offload-params;
//       sub_group_size -> elements per CPU AdamW chunk
//   fp16 {enabled, loss_scale, initial_scale_power, loss_scale_window,
//       hysteresis, min_loss_scale} -> --fp16 and Megatron's scaler flags
//   bf16 {enabled} -> --bf16
//   communication_data_type -> the gradients' reduction dtype
//   optimizer {type Adam/AdamW, params lr, betas, eps, weight_decay} -> --lr,
//       --adam-beta1, --adam-beta2, --adam-eps, --weight-decay
// Keys that only tune DeepSpeed's own machinery (bucket sizes, overlap_comm,
// stage3 prefetch and persistence knobs, logging) are accepted and reported as
// notes saying what zerolm does instead; any other key is an error naming it.
// Read as DeepSpeed reads it, through trainer/config/json_object.h: a repeated
// key is an error (DeepSpeed's "Duplicate keys in DeepSpeed config"), invalid
// JSON is named by line and column. DeepSpeed also accepts hjson (comments,
// unquoted keys); zerolm reads strict JSON.
#pragma once

#include <string>
#include <vector>

#include "trainer/config/megatron_args.h"
#include "trainer/config/origins.h"

namespace zlm::trainer {

struct DeepSpeedSettings {
  int64_t offload_chunk = 0;        // sub_group_size, 0 = default
  std::vector<std::string> notes;   // what was accepted without effect, and why
};

// Reads `path` and merges it into `a`, recording in `origins` what it set.
// Throws zlm::Error naming the file and the key.
DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, Origins& origins, const std::string& path, int dp_size);

bool deepspeed_config_supported();

}  // namespace zlm::trainer
