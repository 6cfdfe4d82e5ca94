// pretrain_gpt's command line: Megatron-LM's pretrain_gpt.py flags, parsed
// strictly. An unknown flag is an error naming it; a known Megatron flag we do
// not support yet is an error saying so; nothing is silently ignored. Each
// flag's own syntax is checked here ("12x" is not an integer); what the values
// must satisfy together is checked once, after DeepSpeed's JSON and the model
// config are merged, by make_train_config (trainer/config/settings.h). Pure C++
// (no LibTorch), so it is unit-tested in every build.
//
//   TrainArgs flags = zlm::trainer::parse_megatron_args(argc, argv);
//   // flags.given: "--zero-stage" -> "--zero-stage 2", for each flag on the command line
//
// Derived values follow Megatron: train samples = --train-samples or
// train_iters * global_batch_size; valid = (train_iters // eval_interval + 1)
// * eval_iters * global_batch_size; test = eval_iters * global_batch_size;
// the learning-rate schedule in samples, as megatron-core's scheduler counts it
// (decay_samples, warmup_samples).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zlm::trainer {

struct TrainArgs {
  // model
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0, seq_length = 0, max_position_embeddings = 0;
  double init_method_std = 0.02, hidden_dropout = 0.1, attention_dropout = 0.1;
  int64_t make_vocab_size_divisible_by = 128;
  bool checkpoint_activations = false;
  bool use_cpu_initialization = false;
  bool deterministic_mode = false;  // Megatron's --deterministic-mode: the same bits on every run of the same settings
  bool bias_gelu_fusion = true, openai_gelu = false;  // both false: erf GELU, as Megatron's plain F.gelu
  // --model-config: a Hugging Face GPT2Config JSON giving the shape (trainer/config/hf_config.h); its
  // vocab_size and eos_token_id are checked against --vocab-file when the data is opened (0/-1: none).
  std::string model_config;
  int64_t model_config_vocab_size = 0, model_config_eos = -1;
  // batch and schedule
  int64_t micro_batch_size = 0, global_batch_size = 0, train_iters = 0, train_samples = 0, lr_decay_iters = 0;
  double lr = 0, min_lr = 0, lr_warmup_fraction = -1, weight_decay = 0.01, clip_grad = 1.0;
  int64_t lr_warmup_iters = 0;
  std::string lr_decay_style = "linear";
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  bool fp16 = false, bf16 = false;
  // The dtype gradients accumulate and are reduced in, with --fp16/--bf16:
  // "fp32" (--accumulate-allreduce-grads-in-fp32, which Megatron sets for
  // --bf16), "fp16"/"bf16" (DeepSpeed's communication_data_type), or empty:
  // Megatron's rule for its flags, the parameters' dtype under --deepspeed.
  std::string grad_reduce_dtype;
  bool check_for_nan = true;             // stop on a NaN/inf loss or gradient norm (not an fp16 overflow)
  double loss_scale = 0;                 // static loss scale; 0 = dynamic
  double initial_loss_scale = 4294967296.0, min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000, hysteresis = 2;
  uint32_t seed = 1234;
  // data
  std::vector<std::pair<double, std::string>> data_path;  // (weight, prefix)
  std::string split = "969, 30, 1", vocab_file, merge_file, tokenizer_type = "GPT2BPETokenizer", data_impl = "mmap";
  // logging, evaluation, checkpoints
  int64_t log_interval = 100, eval_interval = 1000, eval_iters = 100, save_interval = 0, exit_interval = 0;
  std::string save, load;
  std::string ckpt_format = "zerolm";  // or "torch": Megatron-LM's (megatron_format.h); "deepspeed": DeepSpeed's (deepspeed_format.h)
  std::string data_cache_path;  // where the GPTDataset index caches go (default: next to the data)
  std::string metrics_out;  // JSON lines of every logged metric (default: <save>/metrics.jsonl)
  // TensorBoard (trainer/report/tensorboard.h), Megatron's flags and defaults
  std::string tensorboard_dir;
  int64_t tensorboard_log_interval = 1, tensorboard_queue_size = 1000;
  int64_t timing_log_level = 0;             // Megatron's timers: 0 none, 1 and 2 (trainer/report/phase_timers.h)
  std::string timing_log_option = "minmax";  // max, minmax or all
  // Megatron's --profile on the ranks in profile_ranks, with Megatron's two schedules (trainer/run/step_profiler.h):
  // LibTorch's profiler (--use-pytorch-profiler: this run's steps start..end-1 counted from 1, a Chrome trace in
  // --tensorboard-dir), or the steps from iteration count start to end - 1 marked for Nsight Systems
  // (cudaProfilerStart/Stop and NVTX ranges)
  bool profile = false, use_pytorch_profiler = false;
  int64_t profile_step_start = 10, profile_step_end = 12;
  std::vector<int64_t> profile_ranks = {0};
  bool log_timers_to_tensorboard = false, log_batch_size_to_tensorboard = false, log_validation_ppl_to_tensorboard = false;
  bool log_memory_to_tensorboard = false, log_world_size_to_tensorboard = false;
  bool log_learning_rate_to_tensorboard = true, log_loss_scale_to_tensorboard = true;
  bool log_num_zeros_in_grad = false, log_params_norm = false;
  bool exit_signal_handler = false;  // SIGTERM/SIGINT: save a checkpoint before exiting
  bool version = false, quiet = false, verbose = false;  // --version, -q, -v (as every zerolm tool)
  std::string stats_out;  // --stats-out: the end-of-run summary as JSON (rank 0)
  // distribution
  std::string distributed_backend = "nccl";
  int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1;
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // 0: one chunk per stage
  bool sequence_parallel = false;
  std::string device = "auto";  // zerolm: auto | cpu | cuda
  double distributed_timeout_minutes = 10;  // fractions allowed (tests use seconds)
  // ZeRO (issue: Megatron-DeepSpeed's --zero-stage / --cpu-optimizer, or DeepSpeed's JSON)
  int64_t zero_stage = 0;
  bool use_distributed_optimizer = false;  // Megatron's name for ZeRO-1 (at least)
  // Megatron's gradient-reduction overlap and bucket size (numbers; 0: Megatron's default). zerolm
  // always reduces per bucket during backward; these shape distrib_optim.pt's buckets as Megatron-LM's.
  bool overlap_grad_reduce = false;
  bool gradient_accumulation_fusion = true;  // Megatron's default; --no-gradient-accumulation-fusion
  int64_t ddp_bucket_size = 0;
  bool cpu_offload = false;     // fp32 master weights and Adam moments in CPU memory
  bool offload_params = false;  // stage 3: parameter shards in CPU memory too
  bool delayed_param_update = false;       // with cpu_offload: DPU (trainer/zero/engine.h)
  int64_t delayed_param_update_warmup = 40;  // synchronous steps first
  bool deepspeed = false;
  std::string deepspeed_config;
  // Starting local ranks (torchrun / the deepspeed launcher do this otherwise)
  int64_t nproc_per_node = 0, nnodes = 1, node_rank = 0, master_port = 0;
  std::string master_addr;
  std::string hostfile;  // the deepspeed launcher's --hostfile (trainer/config/launcher.h, launch_plan)
  bool no_ssh = false;   // the deepspeed launcher's --no_ssh: this command runs on each host (with --node_rank)
  std::vector<std::string> notes;  // accepted tuning flags that zerolm handles its own way (printed at start)
  // The flags given on the command line, by canonical name ("--cpu-offload" also for
  // "--cpu-optimizer"), each as typed with its value(s): "--cpu-optimizer", "--zero-stage 2".
  std::map<std::string, std::string> given;
  int64_t local_rank_flag = -1;  // --local_rank / --local-rank from a Python launcher (checked against LOCAL_RANK)

  int64_t train_samples_total() const { return train_samples ? train_samples : train_iters * global_batch_size; }
  int64_t total_iters() const { return train_iters ? train_iters : train_samples / global_batch_size; }
  int64_t valid_samples() const { return (total_iters() / eval_interval + 1) * eval_iters * global_batch_size; }
  int64_t test_samples() const { return eval_iters * global_batch_size; }
  // megatron-core's scheduler counts samples. Its lr_decay_steps: --lr-decay-iters (else
  // --train-iters) times the global batch, or with --train-samples that count itself.
  int64_t decay_samples() const { return train_iters ? decay_iters() * global_batch_size : train_samples; }
  // Its lr_warmup_steps: --lr-warmup-fraction times decay_samples() (it may end inside an
  // iteration), else --lr-warmup-iters * global batch.
  double warmup_samples() const;
  int64_t decay_iters() const { return lr_decay_iters ? lr_decay_iters : total_iters(); }
  // Virtual pipeline chunks per rank (1 without --num-layers-per-virtual-pipeline-stage).
  int64_t pipeline_chunks() const {
    return num_layers_per_virtual_pipeline_stage > 0 ? num_layers / pipeline_model_parallel_size / num_layers_per_virtual_pipeline_stage : 1;
  }
};

// argv[1..] -> TrainArgs, each flag's syntax checked (zlm::Error(Usage) naming the
// flag); "--help" throws nothing and sets *help (when given) to the usage text.
TrainArgs parse_megatron_args(int argc, const char* const* argv, std::string* help = nullptr);

// A flag's integer value, all of it ("12x" is refused): zlm::Error(Usage) naming the flag otherwise.
int64_t parse_int_flag(const std::string& flag, const std::string& value);

// Megatron's OptimizerParamScheduler learning rate once it has stepped over `samples` (its
// num_steps: the samples of the updates taken; an iteration that fp16 skips on overflow does
// not step it): warm-up from 0, then cosine/linear/constant decay to min_lr.
double megatron_lr(const TrainArgs& args, int64_t samples);

}  // namespace zlm::trainer
