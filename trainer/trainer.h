// pretrain_gpt's training run: Megatron's GPTDataset samples (formats/gpt_dataset.h)
// over .bin/.idx data (blends included), GPT-2 (trainer/gpt2_model.h), AdamW with
// decay on weights only, Megatron's LR schedule, gradient accumulation to the
// global batch, clipping, validation every --eval-interval and a test at the
// end, Megatron-DeepSpeed style log lines on stderr plus every metric as JSON
// lines, and checkpoints in Megatron's directory layout written atomically.
// One process for now (data parallel and ZeRO are the next step).
#pragma once

#include <string>

#include "trainer/gpt2_model.h"
#include "trainer/megatron_args.h"

namespace zlm::trainer {

// Returns the process exit code. Throws zlm::Error / c10::Error.
int train(const TrainArgs& args);

// The model of the latest checkpoint in `dir` (eval mode, on CPU); sets *iteration.
// Throws zlm::Error naming the file when it is missing or damaged.
Gpt2 load_model(const std::string& dir, int64_t* iteration);

}  // namespace zlm::trainer
