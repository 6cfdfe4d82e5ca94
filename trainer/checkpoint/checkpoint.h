// Checkpoints in Megatron's directory layout:
//   DIR/latest_checkpointed_iteration.txt            the iteration, written last
//   DIR/iter_0000500/mp_rank_00/model_optim_rng.pt      without pipeline parallelism
//   DIR/iter_0000500/mp_rank_01_002/model_optim_rng.pt  tensor rank 1, pipeline stage 2
// Each file is written by data-parallel rank 0 of its (tensor, pipeline) rank
// and holds that part of the model: fp32 weights and Adam moments under the
// whole model's parameter names, cut for its tensor-parallel rank ("partition":
// the dimension and groups of each cut), the layout it was saved with
// ("parallel": TP, PP, virtual chunks, its TP and PP rank), the run's counters,
// the model shape ("config"), its RNG states, and a checksum of every tensor
// ("checksum"; torch's reader does not check the zip CRCs), verified on every
// read: a damaged file is an error naming the tensor. Python reads a file with
// torch.jit.load. Files go into iter_N.tmp.PID first; the directory is renamed
// when every file is complete and only then does the tracker point at it.
//
// Any layout resumes any other: a rank reads the files that hold its layers,
// joins the tensor-parallel parts and cuts its own. A different padding of the
// same vocabulary is trimmed, or padded by repeating the last row, as Megatron's
// checkpoint converter does, with a warning; another vocabulary (the count of
// real tokens, "vocab_entries", differs) is refused: it would drop trained rows
// or add untrained ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "trainer/checkpoint/deepspeed_format.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/config/megatron_args.h"
#include "trainer/model/tensor_parallel.h"
#include "trainer/parallel/grid.h"
#include "trainer/zero/loss_scaler.h"
#include "trainer/zero/engine.h"

namespace zlm::trainer {

struct RunState {
  int64_t iteration = 0, consumed_train = 0, consumed_valid = 0;
  // The samples of the updates taken, which the learning-rate schedule counts (Megatron's
  // OptimizerParamScheduler.num_steps): consumed_train less the iterations fp16 skipped.
  int64_t scheduler_samples = 0;
  // fp16's dynamic loss scale and its trackers; scale 0: none (not fp16).
  LossScaler::State loss_scale;
};

// What --ckpt-format names: ours; Megatron-LM's model_optim_rng.pt per part in the
// same directory layout (megatron_format.h); DeepSpeed's engine's files in
// DIR/global_stepN, named by DIR/latest, with Megatron's tracker beside it as
// Megatron-DeepSpeed writes (deepspeed_format.h; no pipeline parallelism).
enum class CheckpointFormat { kZerolm, kMegatron, kDeepSpeed };
CheckpointFormat checkpoint_format(const std::string& ckpt_format);

// A run's settings as DeepSpeed's files keep them (ZeRO stage, batch sizes,
// AdamW's hyperparameters, clipping, the learning rate of the next step, and
// Megatron's OptimizerParamScheduler state after st's samples); the caller adds
// the loss scaler's state.
DeepSpeedRun deepspeed_run(const TrainArgs& a, const RunState& st, int zero_stage, bool bf16);

// Collective: every rank calls it, with the same save_number (0, 1, 2, ...: the
// run's count of saves, which keys the ranks' agreement on the temporary directory).
// `ds`: with kDeepSpeed and kMegatron, the run's optimizer settings and scheduler (its
// stage, data-parallel size, iteration and step are filled in here); Megatron's format
// writes them as megatron-core's optimizer and scheduler state.
void save_checkpoint(const std::string& dir, Gpt2& model, ZeroEngine& engine, ProcessGrid& grid, const RngTracker& rng,
                     const RunState& st, int save_number, CheckpointFormat format = CheckpointFormat::kZerolm,
                     const DeepSpeedRun* ds = nullptr);

// A whole model (on the CPU, in one part) as iteration 0 of a new checkpoint
// directory, Adam's moments zero: what `pretrain_gpt --load DIR` continues
// from (convert_gpt --import-hf --save). Refuses a directory with a checkpoint.
void save_model_checkpoint(const std::string& dir, Gpt2& model);

// Every rank reads what its part needs. Returns false (and warns) when `a.load`
// has no checkpoint but is also the --save directory (Megatron's tutorial
// pattern starts fresh there); throws zlm::Error otherwise.
bool load_checkpoint(const TrainArgs& a, Gpt2& model, ZeroEngine& engine, ProcessGrid& grid, RngTracker& rng, RunState& st);

// The whole model of the latest checkpoint in `dir`, any layout (eval mode, on
// CPU); sets *iteration. A Megatron-LM checkpoint is read too (megatron_format.h). Throws zlm::Error naming the file when it is missing or damaged.
Gpt2 load_model(const std::string& dir, int64_t* iteration);

}  // namespace zlm::trainer
