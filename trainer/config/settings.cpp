#include "trainer/config/settings.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_files.h"
#include "formats/gpt_dataset.h"
#include "trainer/config/deepspeed_config.h"
#include "trainer/config/hf_config.h"

namespace zlm::trainer {

ZeroPlan zero_plan(ZeroStage stage, bool offload_optimizer, bool offload_parameters, int64_t delayed_update_after) {
  ZeroPlan p;
  p.stage = stage;
  p.shard_optimizer = stage != ZeroStage::kReplicated;
  p.shard_gradients = stage == ZeroStage::kShardedGradients || stage == ZeroStage::kShardedParameters;
  p.shard_parameters = stage == ZeroStage::kShardedParameters;
  p.offload_optimizer = offload_optimizer;
  p.offload_parameters = offload_parameters;
  p.delayed_update_after = delayed_update_after;
  return p;
}

namespace {

// --model-config: the HF config's shape, dropouts and init into the settings. A value also given as
// a flag must agree with the file; the sequence length defaults to n_positions.
void merge_model_config(TrainArgs& a, Origins& o) {
  const HfGpt2Config c = read_hf_gpt2_config(a.model_config);
  auto set = [&](const char* flag, const char* key, auto value, auto& field) {
    const std::string shown = strprintf("%g", static_cast<double>(value));
    if (o.on_command_line(flag) && static_cast<double>(field) != static_cast<double>(value))
      throw Error(ErrorKind::Usage, "%s disagrees with %s's %s %s", o.describe(flag).c_str(), c.path.c_str(), key, shown.c_str());
    field = value;
    o.from_file(flag, c.path + ": " + key + " " + shown);
  };
  set("--num-layers", "n_layer", c.n_layer, a.num_layers);
  set("--hidden-size", "n_embd", c.n_embd, a.hidden_size);
  set("--num-attention-heads", "n_head", c.n_head, a.num_attention_heads);
  set("--max-position-embeddings", "n_positions", c.n_positions, a.max_position_embeddings);
  set("--hidden-dropout", "resid_pdrop", c.resid_pdrop, a.hidden_dropout);
  set("--attention-dropout", "attn_pdrop", c.attn_pdrop, a.attention_dropout);
  set("--init-method-std", "initializer_range", c.initializer_range, a.init_method_std);
  if (!o.given("--seq-length")) a.seq_length = c.n_positions;  // HF trains on n_positions-token blocks
  const bool erf_flags = !a.bias_gelu_fusion && !a.openai_gelu;
  if ((o.on_command_line("--no-bias-gelu-fusion") || o.on_command_line("--openai-gelu")) && erf_flags != c.erf_gelu)
    throw Error(ErrorKind::Usage, "the GELU flags disagree with %s's activation_function (%s)", c.path.c_str(), c.erf_gelu ? "gelu: exact" : "a tanh approximation");
  if (c.erf_gelu) a.bias_gelu_fusion = false, a.openai_gelu = false;
  a.model_config_vocab_size = c.vocab_size;
  a.model_config_eos = c.eos_token_id;
}

// The rules on the merged settings, each checked here once; an error names
// where the offending value came from (Origins::describe).
class Rules {
 public:
  Rules(TrainArgs& a, const Origins& o) : a_(a), o_(o) {}
  void check_all(int world, int data_parallel);

 private:
  [[noreturn]] void fail(const std::string& flag, const std::string& why) const {
    throw Error(ErrorKind::Usage, "%s: %s", o_.describe(flag).c_str(), why.c_str());
  }
  void require(bool ok, const std::string& flag, const std::string& why) const {
    if (!ok) fail(flag, why);
  }
  // A size that must be at least 1 (or a positive real): required when nothing gave it.
  void positive(const char* flag, double v, bool required = true) const {
    if (v > 0) return;
    if (!o_.given(flag)) {
      if (required) throw Error(ErrorKind::Usage, "%s is required", flag);
      return;
    }
    fail(flag, std::string(flag) == "--lr" ? "must be positive" : "must be at least 1");
  }
  void model_and_batch();
  void optimizer();
  void schedule_and_logging();
  void data_and_tokenizer();
  void zero_and_precision();
  void distribution();

  TrainArgs& a_;
  const Origins& o_;
};

void Rules::model_and_batch() {
  positive("--num-layers", static_cast<double>(a_.num_layers));
  positive("--hidden-size", static_cast<double>(a_.hidden_size));
  positive("--num-attention-heads", static_cast<double>(a_.num_attention_heads));
  positive("--seq-length", static_cast<double>(a_.seq_length));
  positive("--micro-batch-size", static_cast<double>(a_.micro_batch_size));
  positive("--global-batch-size", static_cast<double>(a_.global_batch_size), /*required=*/false);
  require(a_.hidden_size % a_.num_attention_heads == 0, "--hidden-size",
          strprintf("must be divisible by --num-attention-heads %ld", (long)a_.num_attention_heads));
  if (a_.max_position_embeddings == 0) a_.max_position_embeddings = a_.seq_length;
  require(a_.max_position_embeddings >= a_.seq_length, "--max-position-embeddings", strprintf("must be >= --seq-length %ld", (long)a_.seq_length));
  require(a_.hidden_dropout >= 0 && a_.hidden_dropout < 1, "--hidden-dropout", "must be in [0, 1)");
  require(a_.attention_dropout >= 0 && a_.attention_dropout < 1, "--attention-dropout", "must be in [0, 1)");
  require(a_.init_method_std > 0, "--init-method-std", "must be positive");
  // Every padding row is allocated, trained and saved: past 65536 it is a typo, not a padding.
  require(a_.make_vocab_size_divisible_by >= 1 && a_.make_vocab_size_divisible_by <= 65536, "--make-vocab-size-divisible-by",
          "must be between 1 and 65536 (Megatron's default is 128)");
}

void Rules::optimizer() {
  positive("--lr", a_.lr);
  require(a_.min_lr >= 0 && a_.min_lr <= a_.lr, "--min-lr", "must be between 0 and --lr");
  require(a_.weight_decay >= 0, "--weight-decay", "must not be negative");
  require(a_.clip_grad >= 0, "--clip-grad", "must not be negative (0 turns clipping off)");
  require(a_.adam_beta1 >= 0 && a_.adam_beta1 < 1, "--adam-beta1", "must be in [0, 1)");
  require(a_.adam_beta2 >= 0 && a_.adam_beta2 < 1, "--adam-beta2", "must be in [0, 1)");
  require(a_.adam_eps > 0, "--adam-eps", "must be positive");
  require(a_.loss_scale >= 0, "--loss-scale", "must not be negative (0: dynamic)");
  require(a_.initial_loss_scale > 0 && a_.min_loss_scale > 0, a_.initial_loss_scale > 0 ? "--min-loss-scale" : "--initial-loss-scale",
          "must be positive");
  require(a_.loss_scale_window >= 1, "--loss-scale-window", "must be at least 1");
  require(a_.hysteresis >= 1, "--hysteresis", "must be at least 1");
}

void Rules::schedule_and_logging() {
  positive("--train-iters", static_cast<double>(a_.train_iters), /*required=*/false);
  positive("--train-samples", static_cast<double>(a_.train_samples), /*required=*/false);
  if ((a_.train_iters > 0) == (a_.train_samples > 0)) throw Error(ErrorKind::Usage, "give exactly one of --train-iters and --train-samples");
  for (const auto& [flag, v] : {std::pair{"--eval-iters", a_.eval_iters}, std::pair{"--save-interval", a_.save_interval},
                                std::pair{"--exit-interval", a_.exit_interval}, std::pair{"--lr-warmup-iters", a_.lr_warmup_iters},
                                std::pair{"--lr-decay-iters", a_.lr_decay_iters}})
    require(v >= 0, flag, "must not be negative");
  require(a_.log_interval > 0, "--log-interval", "must be positive");
  require(a_.eval_interval > 0, "--eval-interval", "must be positive");
  require(a_.tensorboard_log_interval > 0, "--tensorboard-log-interval", "must be positive");
  require(a_.timing_log_level >= 0 && a_.timing_log_level <= 2, "--timing-log-level", "must be 0, 1 or 2");
  require(a_.timing_log_option == "max" || a_.timing_log_option == "minmax" || a_.timing_log_option == "all", "--timing-log-option",
          "must be max, minmax or all");
  require(a_.tensorboard_queue_size > 0, "--tensorboard-queue-size", "must be positive");
  require(!a_.profile || a_.profile_step_start >= 0, "--profile-step-start", "must not be negative");
  require(!a_.profile || a_.profile_step_end > a_.profile_step_start, "--profile-step-end", "must be greater than --profile-step-start");
  require(!(a_.profile && a_.use_pytorch_profiler) || !a_.tensorboard_dir.empty(), "--use-pytorch-profiler",
          "writes its trace into --tensorboard-dir, which is not given");
  require(a_.lr_decay_style == "cosine" || a_.lr_decay_style == "linear" || a_.lr_decay_style == "constant", "--lr-decay-style",
          "must be cosine, linear or constant");
}

void Rules::data_and_tokenizer() {
  if (a_.data_path.empty()) throw Error(ErrorKind::Usage, "--data-path is required");
  for (const auto& [w, prefix] : a_.data_path) require(std::isfinite(w) && w >= 0, "--data-path", "weights must be finite and non-negative");
  formats::parse_split_weights(a_.split);  // throws naming the piece
  require(a_.data_impl == "mmap" || a_.data_impl == "infer", "--data-impl", "only mmap datasets exist since 2023");
  require(a_.tokenizer_type == "GPT2BPETokenizer", "--tokenizer-type", "pretrain_gpt supports GPT2BPETokenizer");
}

void Rules::zero_and_precision() {
  require(a_.zero_stage >= 0 && a_.zero_stage <= 3, "--zero-stage", "must be 0, 1, 2 or 3");
  if (a_.use_distributed_optimizer) {  // Megatron's sharded optimizer: stage 1 unless a higher one is given
    if (o_.given("--zero-stage") && a_.zero_stage == 0)
      fail("--zero-stage", "contradicts --use-distributed-optimizer (a sharded optimizer is ZeRO stage 1 or more)");
    a_.zero_stage = std::max<int64_t>(a_.zero_stage, 1);
  }
  if (a_.offload_params && a_.zero_stage != 3)
    fail("--offload-params", strprintf("needs ZeRO stage 3, the only one that shards parameters (the stage is %ld, from %s)", (long)a_.zero_stage,
                                       o_.describe("--zero-stage").c_str()));
  if (a_.delayed_param_update && !a_.cpu_offload)
    fail("--delayed-param-update", "needs --cpu-offload (or DeepSpeed's offload_optimizer): it overlaps the CPU optimizer step with the next "
                                   "forward and backward");
  require(a_.delayed_param_update_warmup >= 0, "--delayed-param-update-warmup", "must be 0 or more");
  if (o_.given("--delayed-param-update-warmup") && !a_.delayed_param_update)
    fail("--delayed-param-update-warmup", "has no effect without --delayed-param-update");
  if (a_.fp16 && a_.bf16)
    throw Error(ErrorKind::Usage, "%s and %s are exclusive", o_.describe("--fp16").c_str(), o_.describe("--bf16").c_str());
  // Gradients are reduced in fp32 or in the parameters' dtype (trainer.cpp picks which).
  if (const std::string& g = a_.grad_reduce_dtype; (a_.fp16 || a_.bf16) && !g.empty() && g != "fp32" && g != (a_.fp16 ? "fp16" : "bf16"))
    fail("--accumulate-allreduce-grads-in-fp32", strprintf("gradients in %s with %s parameters: zerolm reduces in fp32 or in the parameters' "
         "dtype", g.c_str(), a_.fp16 ? "fp16" : "bf16"));
  if (a_.deepspeed && a_.deepspeed_config.empty()) throw Error(ErrorKind::Usage, "--deepspeed needs --deepspeed_config FILE");
}

void Rules::distribution() {
  // Megatron's default is None (no interleaving); a value given must be a layer count.
  require(a_.ckpt_format == "zerolm" || a_.ckpt_format == "torch" || a_.ckpt_format == "deepspeed", "--ckpt-format",
          "is zerolm (ours), torch (Megatron-LM's) or deepspeed (DeepSpeed's engine's); Megatron's torch_dist and zarr are not written");
  require(a_.ckpt_format != "torch" || a_.num_layers_per_virtual_pipeline_stage == 0, "--ckpt-format torch",
          "is not written for an interleaved pipeline (--num-layers-per-virtual-pipeline-stage) yet");
  if (a_.ckpt_format == "deepspeed") {
    // DeepSpeed's pipeline engine runs ZeRO 0 and 1; its files are written here for a non-interleaved pipeline,
    // and not for bf16 at ZeRO 0 (that engine's BF16_Optimizer, not written)
    require(a_.pipeline_model_parallel_size == 1 ||
                (a_.zero_stage <= 1 && a_.num_layers_per_virtual_pipeline_stage == 0 && !(a_.bf16 && a_.zero_stage == 0)),
            "--ckpt-format deepspeed",
            "with pipeline parallelism is written at ZeRO stage 0 or 1 (DeepSpeed's pipeline engine takes no higher one; with --bf16 at 1) "
            "and no interleaving: save with --ckpt-format zerolm or torch, which convert_gpt exports");
  }
  require(a_.num_layers_per_virtual_pipeline_stage >= (o_.given("--num-layers-per-virtual-pipeline-stage") ? 1 : 0),
          "--num-layers-per-virtual-pipeline-stage", "must be at least 1 (leave it out for the non-interleaved schedule)");
  require(a_.distributed_backend == "nccl" || a_.distributed_backend == "gloo", "--distributed-backend", "must be nccl or gloo");
  require(a_.device == "auto" || a_.device == "cpu" || a_.device == "cuda", "--device", "must be auto, cpu or cuda");
  require(a_.nproc_per_node >= 0, "--nproc-per-node", "must not be negative");
  require(a_.nnodes >= 1, "--nnodes", "must be at least 1");
  require(a_.ddp_bucket_size >= (o_.given("--ddp-bucket-size") ? 1 : 0), "--ddp-bucket-size",
          "must be at least 1 (gradient elements per bucket; leave it out for Megatron's default)");
  require(a_.node_rank >= 0 && a_.node_rank < a_.nnodes, "--node-rank", strprintf("must be in [0, --nnodes %ld)", (long)a_.nnodes));
  require(a_.master_port >= 0 && a_.master_port < 65536, "--master-port", "must be a port number");
  require(a_.distributed_timeout_minutes > 0, "--distributed-timeout-minutes", "must be positive");
}

void Rules::check_all(int world, int data_parallel) {
  model_and_batch();
  optimizer();
  schedule_and_logging();
  data_and_tokenizer();
  zero_and_precision();
  distribution();
  // Megatron's default global batch: one micro-batch on every data-parallel rank.
  if (a_.global_batch_size == 0) a_.global_batch_size = a_.micro_batch_size * data_parallel;
  check_parallel_layout(a_, world);
  if (a_.train_samples > 0 && a_.train_samples < a_.global_batch_size)  // Megatron: train_samples // global batch iterations
    fail("--train-samples", strprintf("is less than one global batch (%ld samples): no iteration to train", (long)a_.global_batch_size));
}

}  // namespace

int data_parallel_size(const TrainArgs& a, int world) {
  const int64_t tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
  if (tp < 1 || pp < 1)
    throw Error(ErrorKind::Usage, "--%s-model-parallel-size %ld: must be at least 1", tp < 1 ? "tensor" : "pipeline", (long)(tp < 1 ? tp : pp));
  if (world % (tp * pp) != 0)
    throw Error(ErrorKind::Usage, "%d ranks cannot form --tensor-model-parallel-size %ld x --pipeline-model-parallel-size %ld groups: "
                "the world size must be a multiple of %ld", world, (long)tp, (long)pp, (long)(tp * pp));
  return static_cast<int>(world / (tp * pp));
}

void check_parallel_layout(const TrainArgs& a, int world) {
  const int64_t tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size, L = a.num_layers;
  const int64_t dp = data_parallel_size(a, world);
  if (a.num_attention_heads % tp != 0)
    throw Error(ErrorKind::Usage, "--num-attention-heads %ld is not divisible by --tensor-model-parallel-size %ld",
                (long)a.num_attention_heads, (long)tp);
  if (L % pp != 0)
    throw Error(ErrorKind::Usage, "--num-layers %ld is not divisible by --pipeline-model-parallel-size %ld", (long)L, (long)pp);
  if (a.sequence_parallel && tp > 1 && a.seq_length % tp != 0)
    throw Error(ErrorKind::Usage, "--sequence-parallel: --seq-length %ld is not divisible by --tensor-model-parallel-size %ld",
                (long)a.seq_length, (long)tp);
  if (a.global_batch_size % (a.micro_batch_size * dp) != 0)
    throw Error(ErrorKind::Usage, "--global-batch-size %ld is not a multiple of --micro-batch-size %ld times the data-parallel size %ld",
                (long)a.global_batch_size, (long)a.micro_batch_size, (long)dp);
  const int64_t micro = a.global_batch_size / (a.micro_batch_size * dp);
  if (const int64_t n = a.num_layers_per_virtual_pipeline_stage; n > 0) {
    if (pp < 2) throw Error(ErrorKind::Usage, "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size of 2 or more");
    if ((L / pp) % n != 0)
      throw Error(ErrorKind::Usage, "--num-layers-per-virtual-pipeline-stage %ld does not divide the %ld layers of each of the %ld stages",
                  (long)n, (long)(L / pp), (long)pp);
    if ((L / pp) / n > 1 && micro % pp != 0)
      throw Error(ErrorKind::Usage, "the interleaved schedule needs the %ld micro-batches per step (global batch / (micro batch x data "
                  "parallel)) to be a multiple of --pipeline-model-parallel-size %ld", (long)micro, (long)pp);
  }
}

TrainConfig make_train_config(const TrainArgs& flags, int world_size) {
  TrainConfig c;
  c.args = flags;
  c.world_size = world_size;
  c.origins = Origins(flags.given);
  TrainArgs& a = c.args;
  if (!a.model_config.empty()) merge_model_config(a, c.origins);
  c.data_parallel = data_parallel_size(a, world_size);
  if (!a.deepspeed_config.empty()) {
    if (!a.deepspeed) {  // Megatron-DeepSpeed's scripts do this; its reader wants ZeRO from the JSON
      a.deepspeed = true;
      c.warnings.push_back("--deepspeed_config " + a.deepspeed_config + " is applied although --deepspeed is missing "
                           "(Megatron-DeepSpeed would ignore the JSON without --deepspeed and train without its ZeRO settings)");
    }
    const DeepSpeedSettings ds = apply_deepspeed_config(a, c.origins, a.deepspeed_config, c.data_parallel);
    c.offload_chunk = ds.offload_chunk;
    for (const auto& n : ds.notes) c.notes.push_back(n);  // logged under the summary line, which names the file
  }
  Rules(a, c.origins).check_all(world_size, c.data_parallel);
  if (a.vocab_file.empty()) {  // GPT-2's own, installed with the tools
    a.vocab_file = resolve_gpt2_files("", a.merge_file, /*need_merges=*/false).vocab_file;
    c.warnings.push_back("no --vocab-file: GPT-2's own vocabulary (" + a.vocab_file + "); give the one your data was tokenized with "
                         "if it was another");
  }
  if (a.use_pytorch_profiler && !a.profile) c.notes.push_back("--use-pytorch-profiler without --profile: nothing is profiled (as in Megatron)");
  if (a.sequence_parallel && a.tensor_model_parallel_size == 1) {
    c.notes.push_back("--sequence-parallel has no effect with --tensor-model-parallel-size 1 (disabled, as in Megatron)");
    a.sequence_parallel = false;
  }
  c.zero = zero_plan(static_cast<ZeroStage>(a.zero_stage), a.cpu_offload, a.offload_params,
                     a.delayed_param_update ? a.delayed_param_update_warmup : -1);
  c.micro_batches = a.global_batch_size / (a.micro_batch_size * c.data_parallel);
  for (const auto& n : a.notes) c.notes.push_back(n);
  if (a.deepspeed)
    c.deepspeed_summary = strprintf("DeepSpeed config %s: ZeRO stage %ld, CPU offload %s, micro batch %ld, global batch %ld%s", a.deepspeed_config.c_str(),
                                    (long)a.zero_stage, a.cpu_offload ? (a.offload_params ? "optimizer + parameters" : "optimizer") : "off",
                                    (long)a.micro_batch_size, (long)a.global_batch_size, a.fp16 ? ", fp16" : a.bf16 ? ", bf16" : "");
  return c;
}

}  // namespace zlm::trainer
