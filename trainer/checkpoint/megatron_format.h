// Megatron-LM's checkpoints as `--ckpt-format torch` writes them (and
// Megatron-DeepSpeed without --deepspeed): DIR/latest_checkpointed_iteration.txt
// names ITER, and DIR/iter_ITER/mp_rank_TT[_PPP]/model_optim_rng.pt, one
// torch.save file per tensor- and pipeline-parallel part, holds `model` (the
// part's state dict), `iteration`, `checkpoint_version` and `args`.
//
// Both naming schemes Megatron has used for GPT are read: megatron-core's
// GPTModel (embedding.word_embeddings.weight,
// decoder.layers.N.self_attention.linear_qkv.weight, ...) and the legacy one
// (language_model.embedding..., language_model.encoder.layers.N.
// self_attention.query_key_value.weight; Megatron-DeepSpeed's attention.*),
// nested or flat. The parts are joined along Megatron's splits; the fused QKV
// rows go from Megatron's order (per head: its q, k and v rows) to ours ([q of
// every head | k | v]); layer numbers become global from the pipeline stage.
// The shape comes from `args`, and so does the GELU (tanh unless
// --no-bias-gelu-fusion without --openai-gelu: erf). A model zerolm does not
// train (rotary or no position embeddings, RMSNorm, SwiGLU, grouped-query
// attention, untied output weights, no linear biases) is refused naming the
// argument.
// What is read: the weights, the iteration and the samples consumed (Megatron
// keeps them in args), and Adam's moments and step: where zerolm wrote them
// (the key "zerolm_optimizer" of pretrain_gpt --ckpt-format torch), else from
// Megatron's own `optimizer` (FP32Optimizer: torch's state dict;
// Float16OptimizerWithFloat16Params: that and the fp32 master weights, which are
// then the weights read; the distributed optimizer: distrib_optim.pt beside the
// part, one buffer, its buckets as the part's args made them), numbered through Megatron's two groups.
// Also the learning-rate scheduler's count of samples (opt_param_scheduler's
// num_steps), fp16's grad scaler state, and the RNG streams of each part
// (rng_state), for a resume in the same layout.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "trainer/checkpoint/torch_pickle.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/zero/loss_scaler.h"

namespace zlm::trainer {

// Megatron's directory names, which our own checkpoints use too: iter_0000150,
// and mp_rank_TT (one pipeline stage) or mp_rank_TT_PPP.
std::string megatron_iter_name(int64_t iteration);
std::string megatron_part_name(int64_t tp_rank, int64_t pp_rank, int64_t pp_size);

// Whether `dir`'s tracked checkpoint is one Megatron-LM wrote (its first part
// is a torch.save file, not a LibTorch archive of ours). False when `dir` has
// no tracker or the file is missing (our reader then says what is wrong).
bool is_megatron_checkpoint(const std::string& dir);

// The directory that `dir`'s latest_checkpointed_iteration.txt points at
// (iter_N, or `release`), whether or not it exists; nullopt without a
// readable tracker.
std::optional<std::filesystem::path> megatron_tracked_dir(const std::string& dir);

// A whole model read from another trainer's checkpoint (Megatron-LM's here,
// DeepSpeed's in deepspeed_format.h), under our parameter names.
// One part's RNG streams as Megatron's rng_state keeps them (undefined where
// absent): torch's CPU generator (torch_rng_state), the CUDA generator
// (cuda_rng_state) and the model-parallel tracker's CUDA state
// (rng_tracker_states' model-parallel-rng), each a byte tensor of torch's
// get_state(); `cpu_tracker`: the tracker of a zerolm run on CPUs, a CPU
// generator's state that Megatron's CUDA tracker cannot hold (zerolm's key
// zerolm_rng_tracker beside rng_state). `file` names the part in messages.
struct PartRng {
  torch::Tensor cpu, device, tracker, cpu_tracker;
  std::string file;
};

struct ImportedModel {
  std::string format;  // "Megatron-LM", "DeepSpeed": for messages
  Gpt2Config config;
  int64_t iteration = 0;
  int64_t tp = 1, pp = 1;                        // the layout it was saved in
  int64_t consumed_train = 0, consumed_valid = 0;  // samples (args.consumed_*_samples; else iteration x global batch)
  int64_t scheduler_samples = -1;  // the learning-rate scheduler's num_steps where saved (fp16's skips not counted); -1: consumed_train
  // fp16's dynamic loss scale and its trackers, where the optimizer state keeps them (Megatron's
  // grad_scaler, DeepSpeed's loss scaler); scale 0: none. A hysteresis not saved is INT64_MAX:
  // all of it.
  LossScaler::State loss_scale;
  // The vocabulary behind config.vocab_size's padded rows, where args say it:
  // the token count (zerolm_vocab_entries, written by us), else Megatron's
  // make_vocab_size_divisible_by (0: not said).
  int64_t vocab_entries = 0, vocab_divisible_by = 0;
  std::map<std::string, torch::Tensor> params;  // whole-model fp32 tensors
  // Adam's moments, where the checkpoint has them in a layout we read (else
  // empty), and the optimizer's step count.
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  int64_t adam_step = 0;
  std::map<std::pair<int64_t, int64_t>, PartRng> rng;  // by (TP rank, pipeline stage), the parts that have rng_state
};

// Megatron's `args` (an argparse.Namespace; Megatron-DeepSpeed saves the same
// in DeepSpeed's files): the model's shape, the layout and the samples
// consumed into `m` (m.iteration set first: it counts the samples when args
// do not). Refuses an architecture zerolm does not train, naming the flag.
void read_megatron_args(const PyValue& args, const std::string& file, ImportedModel& m);

// Joins state dicts under Megatron's names (one per tensor-parallel rank and
// pipeline stage) into whole tensors under ours: the tensor-parallel parts
// concatenated along Megatron's split, the fused QKV rows reordered, layer
// numbers made global. Moments, where given, go through the same.
class MegatronJoin {
 public:
  explicit MegatronJoin(ImportedModel& m) : m_(m) {}
  void add(int64_t tp_rank, int64_t pp_rank, const std::string& name, const torch::Tensor& weight, const std::string& file,
           const torch::Tensor& exp_avg = {}, const torch::Tensor& exp_avg_sq = {});
  // Fills m's params (and moments where every part had them).
  void finish(const std::string& where);

 private:
  struct Parts {
    std::map<int64_t, torch::Tensor> kind[3];
  };
  ImportedModel& m_;
  std::map<std::string, Parts> parts_;
};

ImportedModel read_megatron_model(const std::string& dir);

// Megatron's optimizer groups over a part's parameters (name, tensor), as indices in their order:
// weight decay on every parameter but biases and 1-D ones, then those (megatron-core's
// _get_param_groups and the legacy code before it); empty groups dropped, as torch's optimizer
// never sees them.
std::vector<std::vector<size_t>> megatron_optimizer_groups(const std::vector<std::pair<std::string, torch::Tensor>>& params);
// Megatron's rule for one parameter: no weight decay on biases and one-dimensional tensors.
bool megatron_no_weight_decay(const std::string& name, const torch::Tensor& t);

// Torch's optimizer state dict `torch_opt` over a part's parameters (name, tensor), numbered
// through one group of them all or Megatron's two (megatron_optimizer_groups), and the fp32
// master weights that a 16-bit optimizer keeps beside it (`masters`: per group a list, or with
// `flat` one vector, as DeepSpeed's FP16_Optimizer keeps them, its Adam's state then one entry
// per group). Read by both formats' readers (Megatron's Float16OptimizerWithFloat16Params and
// FP32Optimizer, DeepSpeed's engine without ZeRO). The step is each parameter's (torch's Adam)
// or its group's (a fused Adam: apex's, Transformer Engine's, DeepSpeed's). `why`: the groups do
// not fit (nothing is read); `no_moments`: a parameter without Adam state of its shape (the
// moments are left empty, the master weights read). A missing key throws zlm::Error(Format).
struct TorchOptimizerState {
  std::map<std::string, torch::Tensor> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
  std::string why, no_moments;
};
TorchOptimizerState read_torch_optimizer_state(const PyValue& torch_opt, const PyValue* masters, bool flat,
                                               const std::vector<std::pair<std::string, torch::Tensor>>& params);

// Where megatron-core's distributed optimizer (--use-distributed-optimizer) keeps a part's
// parameters in distrib_optim.pt: its gradient buffer walks the parameters (name, numel; the
// part's model order) backwards, starts each at a multiple of 64 numbers and closes a bucket when
// it reaches `bucket_size` numbers (0: one bucket, Megatron-LM's default without
// --overlap-grad-reduce) and around the tied embedding's copies on a pipeline of several stages
// (`pipelined`: embedding.word_embeddings.weight and output_layer.weight, each its own bucket).
// The file's vectors join the buckets without the padding after each one's last number: `offset`
// is each parameter's start there, `numel` their length (the file's numel_unpadded).
struct DistributedOptimizerLayout {
  std::vector<int64_t> offset;
  int64_t numel = 0;
};
DistributedOptimizerLayout megatron_distributed_optimizer_layout(const std::vector<std::pair<std::string, int64_t>>& params, bool pipelined,
                                                                 int64_t bucket_size);

// distrib_optim.pt as megatron-core's save_parameter_state writes it for one part (gathered from
// every data-parallel rank, buckets coalesced): one buffer keyed by its (parameter, gradient)
// dtypes, e.g. "torch.bfloat16", "torch.float32", holding the fp32 weights `module` and Adam's
// moments (Dicts of tensors in the part's model order, megatron_part_state's) in the layout of
// megatron_distributed_optimizer_layout with `bucket_size` (0: one bucket), zeros between parameters.
std::shared_ptr<PyValue> megatron_distributed_optimizer_state(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq,
                                                              bool pipelined, int64_t bucket_size, const std::string& param_dtype,
                                                              const std::string& grad_dtype);
// Megatron-LM's bucket size for `args`' run on a part: with --overlap-grad-reduce on the first
// pipeline stage, --ddp-bucket-size or max(4e7, 1e6 x data-parallel size); else none (0).
int64_t megatron_bucket_size(const PyValue& args, bool first_stage);

// A step count as torch's optimizers save it: a tensor (torch's Adam), an int or a float.
int64_t step_value(const PyValue& v);

// megatron-core's `_extra_state` entries of a state dict: no weights (None from its local layers,
// a byte tensor from Transformer Engine's).
inline bool is_extra_state(std::string_view name) { return name.ends_with("_extra_state"); }

// Entry `index` of torch's optimizer state (keyed by parameter index): Adam's moments (fp32,
// flat) when both hold at least `numel` numbers (the first `numel` are taken: DeepSpeed's ZeRO
// 1-2 keep the last rank's padding in the moments, not in the weights), and its step; nullopt
// when it has no such state. A fused Adam (apex's, Transformer Engine's, DeepSpeed's) keeps the
// step in the parameter's group instead: has_step is false then.
struct AdamEntry {
  torch::Tensor exp_avg, exp_avg_sq;
  int64_t step = 0;
  bool shaped_as(c10::IntArrayRef shape) const { return saved_shape == shape.vec(); }
  std::vector<int64_t> saved_shape;  // exp_avg's shape in the file
  bool has_step = false;
};
std::optional<AdamEntry> adam_entry(const PyValue* state, int64_t index, int64_t numel);

// The whole model (eval mode, CPU) of an imported checkpoint; `dir` names it in messages.
Gpt2 imported_model(ImportedModel m, const std::string& dir);

// Writes a whole model as Megatron-LM's checkpoint of `iteration` in a new
// directory: one part (TP 1, PP 1), megatron-core's GPTModel names (with the
// _extra_state entries its linear layers save), Megatron's fused QKV order,
// fp32 weights, and args that describe the model (its shape, learned
// positions, LayerNorm, bias_gelu_fusion unless the model's GELU is erf). What
// Megatron's loader needs to continue from it; it has no optimizer state.
void save_megatron_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration);

// One part of a model in Megatron's layout: its tensor-parallel rank's cut of
// the layers of its pipeline stage, and the run's counters for `args`.
struct MegatronPart {
  Gpt2Config config;
  int64_t tp = 1, pp = 1, tp_rank = 0, pp_rank = 0, dp = 1;
  int64_t iteration = 0, consumed_train = 0, consumed_valid = 0;
  // The run's --overlap-grad-reduce and --ddp-bucket-size (0: not given): its args say them, and
  // they decide distrib_optim.pt's buckets (megatron_bucket_size).
  bool overlap_grad_reduce = false;
  int64_t ddp_bucket_size = 0;
};

// A part's state dict under megatron-core's names (layers numbered from 0 on
// each stage, the last stage's copy of the tied embedding as
// output_layer.weight), with the _extra_state entries its linear layers save
// and Megatron's fused QKV order, fp32. `ours`: the part's tensors under our
// whole-model names ("blocks.5.attn_qkv.weight"), cut for its TP rank.
std::shared_ptr<PyValue> megatron_part_state(const std::map<std::string, torch::Tensor>& ours, const MegatronPart& part);
// The whole model as one part (TP 1, PP 1).
std::shared_ptr<PyValue> megatron_state_dict(Gpt2& model);
// The samples the learning-rate schedule has counted, from a file's scheduler state
// (opt_param_scheduler, or lr_scheduler as older Megatron and DeepSpeed's engine name it):
// its num_steps, which fp16's skipped iterations do not advance. -1 when absent, or when not
// within 0..m.consumed_train (no count of these samples).
int64_t scheduler_samples_of(const PyValue& top, const ImportedModel& m);

// Megatron's args describing the part's model, layout and counters.
std::shared_ptr<PyValue> megatron_args(const MegatronPart& part);

// A part's `rng_state` as Megatron-LM saves it without --data-parallel-random-init (a list of
// one dict), so that its loader restores the streams with no --no-load-rng:
//  - random_rng_state and np_rng_state: Python's and numpy's global generators as Megatron's
//    seeding leaves them (seeded with `seed`, the run's --seed + 100 x pipeline stage; training
//    draws nothing from them); numpy's key as a list of ints, which np.random.set_state takes,
//    so that no numpy class is pickled;
//  - torch_rng_state: `streams.cpu`;
//  - cuda_rng_state and rng_tracker_states (data-parallel-rng, model-parallel-rng,
//    expert-parallel-rng, seeded as megatron-core seeds them): `streams.device` and
//    `streams.tracker` where a GPU run has them (CUDA states, 16 bytes), else the states the
//    seeds give (seed, offset 0): a CPU run's streams are CPU generators.
std::shared_ptr<PyValue> megatron_rng_state(const PartRng& streams, uint64_t seed, int64_t tp_rank);

// The streams of a part's rng_state (entry 0 of the list, or the top-level keys of files
// written before 2022) and zerolm_rng_tracker; all undefined when the part has none. A stream
// that is not a byte tensor is an error naming `file`.
PartRng read_megatron_rng(const PyValue& part, const std::string& file);

}  // namespace zlm::trainer
