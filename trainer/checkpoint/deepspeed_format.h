// DeepSpeed's checkpoints, as its engine's save_checkpoint writes them (and
// Megatron-DeepSpeed with --deepspeed, which adds Megatron's `args` and
// `iteration` to the model file): DIR/latest names a tag, and DIR/TAG holds
//   mp_rank_TT_model_states.pt                  ZeRO 0-2: `module` (the state
//                                               dict), `param_shapes`, counters
//   zero_pp_rank_D_mp_rank_TT_model_states.pt   ZeRO 3: the same, with empty
//                                               tensors in `module`
//   zero_pp_rank_D_mp_rank_TT_optim_states.pt   ZeRO 1-3: data-parallel rank D's
//                                               partition of the fp32 weights and
//                                               Adam's moments
// one set per tensor-parallel rank TT. The partitions are laid out as
// DeepSpeed's zero_to_fp32.py reconstructs them: ZeRO 1 and 2 cut each
// parameter group's flat vector (parameters in `param_shapes` order, padded
// to a multiple of 2 x ranks) into one piece per rank; ZeRO 3 cuts every
// parameter into ceil(numel / ranks) pieces, rank D holding piece D of each.
//
// The pipeline engine (PipelineModule, Megatron-DeepSpeed's GPTModelPipe)
// saves each layer's weights in layer_XX[-model_TT]-model_states.pt instead
// of `module`, and names parameters by layer index ("3.mlp...") in
// `param_shapes`; each layer is recognised by what it holds (embedding,
// transformer layer, final LayerNorm).
//
// Read: the fp32 weights (from the partitions where there are any, else from
// `module` or the layer files), Adam's moments and step from the partitions
// (a pipeline's: per stage, mp_rank_SS, without tensor parallelism), the
// iteration and the samples consumed;
// the model's shape from Megatron's `args`, which a checkpoint without them
// lacks (its attention heads are in no tensor's shape): it is refused saying
// so. Names are Megatron's (megatron_format.h).
#pragma once

#include <string>

#include "trainer/checkpoint/megatron_format.h"
#include "trainer/config/settings.h"

namespace zlm::trainer {

// Whether `dir` holds a DeepSpeed checkpoint: a `latest` tag whose directory
// has model-state files.
bool is_deepspeed_checkpoint(const std::string& dir);

ImportedModel read_deepspeed_model(const std::string& dir);

// Writes a whole model as DeepSpeed's checkpoint of `iteration` (tag
// global_stepN) in a new directory, partitioned as ZeRO stage `stage` (1-3; 0 is refused)
// over `dp_size` data-parallel ranks would hold it, with megatron-core's names
// and Megatron's `args` (what Megatron-DeepSpeed saves), Adam's moments zero.
// DeepSpeed's zero_to_fp32.py / get_fp32_state_dict_from_zero_checkpoint
// rebuilds the weights from it.
void save_deepspeed_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration, ZeroStage stage, int64_t dp_size);

}  // namespace zlm::trainer
