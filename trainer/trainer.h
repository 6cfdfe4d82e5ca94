// pretrain_gpt's training run: Megatron's GPTDataset samples (formats/gpt_dataset.h)
// over .bin/.idx data (blends included), GPT-2 (trainer/gpt2_model.h), AdamW with
// decay on weights only, Megatron's LR schedule, gradient accumulation to the
// global batch, clipping, validation every --eval-interval and a test at the
// end, Megatron-DeepSpeed style log lines on stderr plus every metric as JSON
// lines, and checkpoints in Megatron's directory layout written atomically;
// data parallel with ZeRO stages 0-3 (trainer/zero.h), tensor and pipeline
// parallel (trainer/parallel.h, trainer/schedule.h), on CPU processes or GPUs.
#pragma once

#include <string>

#include "trainer/checkpoint.h"  // load_model
#include "trainer/megatron_args.h"

namespace zlm::trainer {

// Returns the process exit code. Throws zlm::Error / c10::Error.
int train(const TrainArgs& args);

}  // namespace zlm::trainer
