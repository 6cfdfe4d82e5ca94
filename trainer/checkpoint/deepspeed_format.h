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
// (a pipeline's: per stage and tensor-parallel rank, mp_rank_MM), the
// iteration and the samples consumed;
// the model's shape from Megatron's `args`, which a checkpoint without them
// lacks (its attention heads are in no tensor's shape): it is refused saying
// so. Names are Megatron's (megatron_format.h).
//
// fp16 and bf16 engines keep fp32 master weights beside a 16-bit `module`: without ZeRO
// in the model file's `optimizer` (FP16_Optimizer: one flat vector per group;
// FP16_UnfusedOptimizer: one per parameter), with ZeRO in the partitions, which bf16
// engines name bf16_zero_pp_rank_D_mp_rank_TT_optim_states.pt (BF16_Optimizer too, with no
// stage recorded and the padding kept in its weights). Those master weights are read.
//
// Written (pretrain_gpt --ckpt-format deepspeed, convert_gpt --export-deepspeed):
// the same files for ZeRO 0-3 and any tensor-parallel size, as DeepSpeed 0.19's engine of
// the run's precision writes them for megatron-core's GPTModel and torch's AdamW in
// Megatron's two groups (without ZeRO in fp16/bf16: FP16_Optimizer, the wrapper of a
// fused Adam), with the state its load_checkpoint restores.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "trainer/checkpoint/megatron_format.h"
#include "trainer/config/settings.h"

namespace zlm::trainer {

// Whether `dir` holds a DeepSpeed checkpoint: a `latest` tag whose directory
// has model-state files.
bool is_deepspeed_checkpoint(const std::string& dir);

ImportedModel read_deepspeed_model(const std::string& dir);

// What a run's DeepSpeed files record beyond the model: the ZeRO stage (0-3) and
// data-parallel ranks the partitions are cut for, the counters, the optimizer's
// hyperparameters (torch AdamW's param_groups, Megatron's two: decay on
// matrices, none on biases and LayerNorms), the loss scaler, and Megatron's
// OptimizerParamScheduler state for the engine's lr_scheduler (null: None).
struct DeepSpeedRun {
  int stage = 1;
  int64_t dp_size = 1, iteration = 0, adam_step = 0;
  int64_t micro_batch = 0, global_batch = 0;  // for ds_config; 0: not said
  double lr = 0, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, clip_grad = 0;
  double max_lr = 0, min_lr = 0;  // the schedule's (megatron-core's parameter groups keep them)
  bool fp16 = false, bf16 = false;  // the files of DeepSpeed's fp16 / bf16 engine
  bool dynamic_loss_scale = false;  // fp16's DynamicLossScaler (its window starts afresh), else a static LossScaler
  double loss_scale = 1.0, min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000, hysteresis = 2;
  // The dynamic scale's trackers (Megatron's grad_scaler): clean steps, and the overflows the
  // hysteresis still allows (below 0 after a run of them; nullopt: all of it).
  int64_t loss_scale_growth = 0;
  std::optional<int64_t> hysteresis_left;
  std::shared_ptr<PyValue> lr_scheduler;
  uint64_t seed = 0;  // --seed: Megatron's rng_state is seeded from it
  // Megatron's format: --use-distributed-optimizer (Adam's state goes to distrib_optim.pt), and
  // whether the gradient buffer that names it there is fp32 or of the parameters' dtype: as
  // Megatron-LM's defaults make it for the run's flags (fp32 with
  // --accumulate-allreduce-grads-in-fp32, which Megatron-LM turns on for --bf16).
  bool distributed_optimizer = false, grad_reduce_fp32 = false;
  bool overlap_grad_reduce = false;  // Megatron's --overlap-grad-reduce and --ddp-bucket-size (0: not given): distrib_optim.pt's buckets
  int64_t ddp_bucket_size = 0;
  std::shared_ptr<PyValue> client_state;  // further entries of the model-states files (a Dict: Megatron-DeepSpeed's rng_state)
};

// torch.optim.AdamW's state_dict() over one part's parameters (`module`, megatron_part_state's
// order; the moments alike): one entry per parameter in its shape, numbered through Megatron's
// two groups, each group with AdamW's hyperparameters and the multipliers Megatron's scheduler
// reads. What DeepSpeed's fp32 engine without ZeRO saves, and the core of megatron-core's
// optimizer state (megatron_optimizer_state). `masters`, when given, receives the parameters'
// fp32 values as one list per group, in the state's order.
std::shared_ptr<PyValue> adamw_part_state(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq, const DeepSpeedRun& run,
                                          std::shared_ptr<PyValue>* masters = nullptr);

// The tag directory name of an iteration's checkpoint: global_stepN (Megatron-DeepSpeed's).
std::string deepspeed_tag(int64_t iteration);

// Writes tensor-parallel rank part.tp_rank's files into `tag_dir` as DeepSpeed's
// engine saves them: mp_rank_TT_model_states.pt (ZeRO 3: one per data-parallel
// rank, zero_pp_rank_D_mp_rank_TT_model_states.pt) with megatron-core's names
// and Megatron's `args`, and each rank's zero_pp_rank_D_mp_rank_TT_optim_states.pt
// with its pieces of the fp32 weights and Adam's moments and step, so that
// DeepSpeed's engine (load_checkpoint) continues the run and zero_to_fp32.py
// rebuilds the weights. `params` and the moments are under our whole-model
// names, cut for the part's tensor-parallel rank. ZeRO 3 splits a group into
// sub-groups at DeepSpeed's default sub_group_size (1e9 numbers per rank).
// A part of a pipeline (part.pp > 1; ZeRO 0 or 1, as DeepSpeed's pipeline engine runs) is
// written as that engine saves Megatron-DeepSpeed's GPTModelPipe: each layer's weights in
// layer_XX-model_TT-model_states.pt (XX its spec index: 1 the embedding, 2 + l layer l, 2 + L
// the final LayerNorm; TT the tensor-parallel rank), and the stage's mp_rank_MM_model_states.pt
// (no module) and optimizer files, MM = stage x TP + TT (the rank in the pipeline grid's
// model-parallel group), its parameters named and ordered as the pipeline module's
// (tied_modules.embed.word_embeddings.weight, "3.self_attention.query_key_value.weight").
void write_deepspeed_part(const std::string& tag_dir, const MegatronPart& part, const std::map<std::string, torch::Tensor>& params,
                          const std::map<std::string, torch::Tensor>& exp_avg, const std::map<std::string, torch::Tensor>& exp_avg_sq,
                          const DeepSpeedRun& run);

// A whole model as DeepSpeed's checkpoint of `iteration` in a new directory
// (write_deepspeed_part, TP 1, then `latest`), Adam's moments zero: what
// convert_gpt --export-deepspeed writes.
void save_deepspeed_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration, ZeroStage stage, int64_t dp_size);

}  // namespace zlm::trainer
