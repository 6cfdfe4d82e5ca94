// pretrain_gpt's training run: Megatron's GPTDataset samples (formats/gpt_dataset.h)
// over .bin/.idx data (blends included), GPT-2 (trainer/model/gpt2_model.h), AdamW with
// decay on weights only, Megatron's LR schedule, gradient accumulation to the
// global batch, clipping, validation every --eval-interval and a test at the
// end, Megatron-DeepSpeed style log lines on stderr plus every metric as JSON
// lines, and checkpoints in Megatron's directory layout written atomically;
// data parallel with ZeRO stages 0-3 (trainer/zero/engine.h), tensor and pipeline
// parallel (trainer/parallel/grid.h, trainer/parallel/schedule.h), on CPU processes or GPUs.
//
//   TrainConfig cfg = make_train_config(parse_megatron_args(argc, argv), env.world_size);
//   return train(cfg, env);
#pragma once

#include "trainer/config/dist_env.h"
#include "trainer/config/settings.h"

namespace zlm::trainer {

// One rank's run of the configured training; `env` is this process's place in
// the job. Returns the process exit code. Throws zlm::Error / c10::Error.
int train(const TrainConfig& cfg, const DistEnv& env);

}  // namespace zlm::trainer
