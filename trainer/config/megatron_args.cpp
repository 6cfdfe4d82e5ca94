#include "trainer/config/megatron_args.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/core/error.h"

namespace zlm::trainer {

namespace {


double to_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double out = std::strtod(v.c_str(), &end);
  if (v.empty() || !end || *end != '\0' || !std::isfinite(out))
    throw Error(ErrorKind::Usage, "%s: '%s' is not a number", flag.c_str(), v.c_str());
  return out;
}

struct Spec {
  enum Kind { Flag, Int, Double, String, List } kind;
  std::function<void(TrainArgs&, const std::vector<std::string>&)> set;
  const char* help;
};

std::map<std::string, Spec> specs() {
  std::map<std::string, Spec> m;
  auto i64 = [&](const char* name, int64_t TrainArgs::*field, const char* help) {
    m[name] = {Spec::Int, [=](TrainArgs& a, const std::vector<std::string>& v) { a.*field = parse_int_flag(name, v[0]); }, help};
  };
  auto dbl = [&](const char* name, double TrainArgs::*field, const char* help) {
    m[name] = {Spec::Double, [=](TrainArgs& a, const std::vector<std::string>& v) { a.*field = to_double(name, v[0]); }, help};
  };
  auto str = [&](const char* name, std::string TrainArgs::*field, const char* help) {
    m[name] = {Spec::String, [=](TrainArgs& a, const std::vector<std::string>& v) { a.*field = v[0]; }, help};
  };
  auto flag = [&](const char* name, bool TrainArgs::*field, const char* help) {
    m[name] = {Spec::Flag, [=](TrainArgs& a, const std::vector<std::string>&) { a.*field = true; }, help};
  };
  auto no_flag = [&](const char* name, bool TrainArgs::*field, const char* help) {  // Megatron's --no-X: turns a default off
    m[name] = {Spec::Flag, [=](TrainArgs& a, const std::vector<std::string>&) { a.*field = false; }, help};
  };
  i64("--num-layers", &TrainArgs::num_layers, "transformer layers");
  i64("--hidden-size", &TrainArgs::hidden_size, "hidden size");
  i64("--num-attention-heads", &TrainArgs::num_attention_heads, "attention heads");
  i64("--seq-length", &TrainArgs::seq_length, "sequence length");
  i64("--max-position-embeddings", &TrainArgs::max_position_embeddings, "learned positions (>= --seq-length)");
  i64("--micro-batch-size", &TrainArgs::micro_batch_size, "samples per forward pass");
  i64("--global-batch-size", &TrainArgs::global_batch_size, "samples per optimizer step (micro-batches accumulate)");
  i64("--train-iters", &TrainArgs::train_iters, "optimizer steps");
  i64("--train-samples", &TrainArgs::train_samples, "samples to train on (instead of --train-iters)");
  i64("--lr-decay-iters", &TrainArgs::lr_decay_iters, "iterations over which the LR decays");
  i64("--lr-warmup-iters", &TrainArgs::lr_warmup_iters, "warm-up iterations");
  i64("--make-vocab-size-divisible-by", &TrainArgs::make_vocab_size_divisible_by, "vocab padding multiple");
  i64("--log-interval", &TrainArgs::log_interval, "iterations between log lines");
  i64("--eval-interval", &TrainArgs::eval_interval, "iterations between validations");
  i64("--eval-iters", &TrainArgs::eval_iters, "batches per validation");
  i64("--save-interval", &TrainArgs::save_interval, "iterations between checkpoints");
  i64("--exit-interval", &TrainArgs::exit_interval, "exit after this many iterations (a multiple)");
  i64("--tensor-model-parallel-size", &TrainArgs::tensor_model_parallel_size, "ranks that split each layer (Megatron's 1D tensor parallelism)");
  i64("--pipeline-model-parallel-size", &TrainArgs::pipeline_model_parallel_size, "pipeline stages (layers split evenly, 1F1B schedule)");
  i64("--num-layers-per-virtual-pipeline-stage", &TrainArgs::num_layers_per_virtual_pipeline_stage,
      "layers per virtual stage: each rank holds several chunks (interleaved 1F1B)");
  flag("--sequence-parallel", &TrainArgs::sequence_parallel, "split LayerNorm and dropout regions along the sequence over the TP ranks");
  dbl("--lr", &TrainArgs::lr, "peak learning rate");
  dbl("--min-lr", &TrainArgs::min_lr, "final learning rate");
  dbl("--lr-warmup-fraction", &TrainArgs::lr_warmup_fraction, "warm-up as a fraction of --lr-decay-iters");
  dbl("--weight-decay", &TrainArgs::weight_decay, "AdamW weight decay (weights only)");
  dbl("--clip-grad", &TrainArgs::clip_grad, "gradient norm clipping (0: off)");
  dbl("--adam-beta1", &TrainArgs::adam_beta1, "Adam beta1");
  dbl("--adam-beta2", &TrainArgs::adam_beta2, "Adam beta2");
  dbl("--adam-eps", &TrainArgs::adam_eps, "Adam epsilon");
  dbl("--loss-scale", &TrainArgs::loss_scale, "static fp16 loss scale (default: dynamic)");
  dbl("--initial-loss-scale", &TrainArgs::initial_loss_scale, "first dynamic loss scale");
  dbl("--min-loss-scale", &TrainArgs::min_loss_scale, "smallest dynamic loss scale");
  i64("--loss-scale-window", &TrainArgs::loss_scale_window, "clean steps before the dynamic scale doubles");
  i64("--hysteresis", &TrainArgs::hysteresis, "overflows tolerated before the scale halves");
  dbl("--init-method-std", &TrainArgs::init_method_std, "weight init std");
  dbl("--hidden-dropout", &TrainArgs::hidden_dropout, "dropout after attention/MLP and embeddings");
  dbl("--attention-dropout", &TrainArgs::attention_dropout, "dropout on attention weights");
  str("--lr-decay-style", &TrainArgs::lr_decay_style, "cosine, linear or constant");
  str("--split", &TrainArgs::split, "train/valid/test split weights, e.g. 949,50,1");
  str("--model-config", &TrainArgs::model_config,
      "zerolm: a Hugging Face GPT2Config JSON (n_layer, n_embd, n_head, n_positions, dropouts) giving the model's shape");
  str("--vocab-file", &TrainArgs::vocab_file, "GPT-2 vocab.json (default: GPT-2's own, installed with the tools)");
  str("--merge-file", &TrainArgs::merge_file, "GPT-2 merges.txt");
  str("--tokenizer-type", &TrainArgs::tokenizer_type, "GPT2BPETokenizer");
  str("--data-impl", &TrainArgs::data_impl, "mmap");
  str("--save", &TrainArgs::save, "checkpoint directory to write");
  str("--ckpt-format", &TrainArgs::ckpt_format, "zerolm (ours: fp32 weights, Adam, RNG; the default), torch (Megatron-LM's "
      "model_optim_rng.pt with its optimizer, scheduler and RNG state, which Megatron-LM resumes) or deepspeed (DeepSpeed's engine's global_stepN "
      "files at ZeRO 1-3, which its load_checkpoint continues and zero_to_fp32.py reads)");
  str("--load", &TrainArgs::load, "checkpoint directory to resume from");
  str("--distributed-backend", &TrainArgs::distributed_backend, "nccl or gloo");
  str("--data-cache-path", &TrainArgs::data_cache_path, "directory for the index caches (default: next to the data)");
  str("--metrics-out", &TrainArgs::metrics_out, "JSON lines of every logged metric (default: <save>/metrics.jsonl)");
  str("--stats-out", &TrainArgs::stats_out, "write the end-of-run summary as JSON to FILE (as every zerolm tool)");
  str("--tensorboard-dir", &TrainArgs::tensorboard_dir, "write TensorBoard event files here (rank 0; Megatron's scalar tags)");
  i64("--tensorboard-log-interval", &TrainArgs::tensorboard_log_interval, "iterations between TensorBoard training scalars (default 1)");
  i64("--tensorboard-queue-size", &TrainArgs::tensorboard_queue_size, "TensorBoard scalars held before they are written (default 1000)");
  flag("--log-timers-to-tensorboard", &TrainArgs::log_timers_to_tensorboard,
       "TensorBoard: iteration-time, and with --timing-log-level each phase's <name>-time, at every --log-interval");
  i64("--timing-log-level", &TrainArgs::timing_log_level,
      "time the step's phases (forward-backward, all-grads-sync, optimizer, ...) and print them at every --log-interval: 0 (default), 1 or 2");
  str("--timing-log-option", &TrainArgs::timing_log_option, "the phases' times across ranks: max, minmax (default) or all");
  flag("--profile", &TrainArgs::profile,
       "profile the steps from --profile-step-start to --profile-step-end: for Nsight Systems (nsys profile --capture-range=cudaProfilerApi), "
       "or with --use-pytorch-profiler through LibTorch's profiler");
  flag("--use-pytorch-profiler", &TrainArgs::use_pytorch_profiler,
       "with --profile: LibTorch's profiler (CPU operators and, on CUDA, kernels) writes a Chrome trace "
       "(<host>_<pid>.<ms>.pt.trace.json) into --tensorboard-dir");
  i64("--profile-step-start", &TrainArgs::profile_step_start,
      "where profiling starts (default 10): this run's step of that number (counted from 1) with --use-pytorch-profiler, "
      "else the step that starts at that iteration count");
  i64("--profile-step-end", &TrainArgs::profile_step_end, "where profiling stops (default 12): before that step, or that iteration count");
  flag("--log-batch-size-to-tensorboard", &TrainArgs::log_batch_size_to_tensorboard, "TensorBoard: batch-size");
  flag("--log-validation-ppl-to-tensorboard", &TrainArgs::log_validation_ppl_to_tensorboard, "TensorBoard: lm loss validation ppl");
  flag("--log-memory-to-tensorboard", &TrainArgs::log_memory_to_tensorboard, "TensorBoard: the CUDA allocator's mem-* figures (CUDA runs)");
  flag("--log-world-size-to-tensorboard", &TrainArgs::log_world_size_to_tensorboard, "TensorBoard: world-size");
  no_flag("--no-log-learning-rate-to-tensorboard", &TrainArgs::log_learning_rate_to_tensorboard, "TensorBoard: leave out learning-rate");
  no_flag("--no-log-loss-scale-to-tensorboard", &TrainArgs::log_loss_scale_to_tensorboard, "TensorBoard: leave out loss-scale");
  flag("--log-num-zeros-in-grad", &TrainArgs::log_num_zeros_in_grad, "count the zero gradient elements (log line, metrics, TensorBoard)");
  flag("--log-params-norm", &TrainArgs::log_params_norm, "the parameters' L2 norm after each step (log line, metrics, TensorBoard)");
  flag("--exit-signal-handler", &TrainArgs::exit_signal_handler, "on SIGTERM/SIGINT: finish the iteration, save a checkpoint (--save), exit 0");
  str("--device", &TrainArgs::device, "zerolm: auto, cpu or cuda");
  dbl("--distributed-timeout-minutes", &TrainArgs::distributed_timeout_minutes, "collective timeout: a silent rank is reported after it (fractions allowed)");
  i64("--zero-stage", &TrainArgs::zero_stage, "ZeRO stage: 0 replicated, 1 optimizer states, 2 + gradients, 3 + parameters sharded");
  flag("--cpu-offload", &TrainArgs::cpu_offload, "zerolm: fp32 master weights and Adam moments in (pinned) CPU memory, CPU AdamW");
  flag("--cpu-optimizer", &TrainArgs::cpu_offload, "Megatron-DeepSpeed's name for --cpu-offload");
  flag("--offload-params", &TrainArgs::offload_params, "zerolm: with --zero-stage 3, parameter shards in CPU memory too");
  flag("--delayed-param-update", &TrainArgs::delayed_param_update,
       "zerolm: with --cpu-offload, the ZeRO-Offload paper's delayed parameter update: step i's CPU AdamW overlaps step i+1's "
       "forward/backward, which see the weights one update late");
  i64("--delayed-param-update-warmup", &TrainArgs::delayed_param_update_warmup, "synchronous steps before the delayed updates start (default 40)");
  flag("--deepspeed", &TrainArgs::deepspeed, "read ZeRO and precision settings from --deepspeed_config");
  str("--deepspeed_config", &TrainArgs::deepspeed_config, "DeepSpeed JSON config (zero_optimization, fp16, bf16, batch sizes)");
  str("--deepspeed-config", &TrainArgs::deepspeed_config, "same as --deepspeed_config");
  flag("--use-distributed-optimizer", &TrainArgs::use_distributed_optimizer,
       "Megatron's sharded optimizer: ZeRO stage 1 (or the higher stage --zero-stage or the DeepSpeed JSON gives)");
  flag("--overlap-grad-reduce", &TrainArgs::overlap_grad_reduce,
       "Megatron's overlap of the gradient reduction with backward, which zerolm always does (per bucket); with "
       "--use-distributed-optimizer --ckpt-format torch, distrib_optim.pt gets Megatron-LM's buckets for this flag");
  no_flag("--no-gradient-accumulation-fusion", &TrainArgs::gradient_accumulation_fusion,
          "16-bit training at ZeRO 0-1: the linear layers' backward makes 16-bit weight gradients that are then added to the "
          "fp32 ones, instead of adding into them inside the GEMM (Megatron's gradient-accumulation fusion, the default)");
  i64("--ddp-bucket-size", &TrainArgs::ddp_bucket_size,
      "Megatron's gradient bucket size in numbers (with --overlap-grad-reduce; default max(4e7, 1e6 x data-parallel size)): "
      "zerolm's buckets are one per transformer block; this sets distrib_optim.pt's, as Megatron-LM lays them out");
  i64("--nproc-per-node", &TrainArgs::nproc_per_node, "zerolm: start this many local ranks (like torchrun / deepspeed)");
  i64("--nnodes", &TrainArgs::nnodes, "with --nproc-per-node: number of nodes");
  i64("--node-rank", &TrainArgs::node_rank, "with --nproc-per-node: this node's index");
  str("--master-addr", &TrainArgs::master_addr, "with --nproc-per-node: rank 0's host (default 127.0.0.1 or $MASTER_ADDR)");
  i64("--master-port", &TrainArgs::master_port, "with --nproc-per-node: rendezvous port (default $MASTER_PORT or 29500)");
  // The same launcher flags in torchrun's underscore spellings and the deepspeed launcher's names
  // (`deepspeed --num_gpus 4 pretrain_gpt.py ...` becomes `pretrain_gpt --num_gpus 4 ...`).
  i64("--nproc_per_node", &TrainArgs::nproc_per_node, "same as --nproc-per-node (torchrun's spelling)");
  i64("--num_gpus", &TrainArgs::nproc_per_node, "same as --nproc-per-node (the deepspeed launcher's name)");
  i64("--num_accelerators", &TrainArgs::nproc_per_node, "same as --nproc-per-node (the deepspeed launcher's name)");
  i64("--num_nodes", &TrainArgs::nnodes, "same as --nnodes (the deepspeed launcher's name)");
  i64("--node_rank", &TrainArgs::node_rank, "same as --node-rank");
  str("--master_addr", &TrainArgs::master_addr, "same as --master-addr");
  i64("--master_port", &TrainArgs::master_port, "same as --master-port");
  str("--hostfile", &TrainArgs::hostfile, "the deepspeed launcher's hostfile ('HOST slots=N' lines): its first --num_nodes hosts; one runs here "
      "with its slots, several need --no_ssh --node_rank R on each (pretrain_gpt never ssh-es)");
  str("-H", &TrainArgs::hostfile, "same as --hostfile");
  flag("--no_ssh", &TrainArgs::no_ssh, "the deepspeed launcher's no-ssh mode: the same command on each host of --hostfile, with --node_rank");
  i64("--local_rank", &TrainArgs::local_rank_flag, "set by the deepspeed launcher; must agree with $LOCAL_RANK");
  i64("--local-rank", &TrainArgs::local_rank_flag, "same as --local_rank");
  flag("--fp16", &TrainArgs::fp16, "fp16 with dynamic loss scaling (CUDA)");
  flag("--bf16", &TrainArgs::bf16, "bf16 (CUDA)");
  m["--accumulate-allreduce-grads-in-fp32"] = {Spec::Flag, [](TrainArgs& a, const std::vector<std::string>&) { a.grad_reduce_dtype = "fp32"; },
                                                "with --fp16: accumulate and reduce gradients in fp32 (--bf16 always does, as in Megatron)"};
  flag("--checkpoint-activations", &TrainArgs::checkpoint_activations, "recompute each layer in backward");
  // Megatron's GELU switches: its fused bias-GELU (the default) and --openai-gelu compute the
  // tanh approximation; --no-bias-gelu-fusion alone leaves F.gelu, which is exact (erf).
  flag("--bias-gelu-fusion", &TrainArgs::bias_gelu_fusion, "tanh-approximated GELU, as Megatron's fused bias-GELU (the default)");
  no_flag("--no-bias-gelu-fusion", &TrainArgs::bias_gelu_fusion, "exact (erf) GELU, as Megatron without the fusion (unless --openai-gelu)");
  flag("--openai-gelu", &TrainArgs::openai_gelu, "tanh-approximated GELU (OpenAI's formula)");
  flag("--deterministic-mode", &TrainArgs::deterministic_mode,
       "deterministic GPU kernels (PyTorch's deterministic algorithms, cuBLAS's fixed workspace): the same bits on every run, slower");
  flag("--use-cpu-initialization", &TrainArgs::use_cpu_initialization, "draw the initial weights on the CPU (a GPU run then starts as a CPU run)");
  no_flag("--no-check-for-nan-in-loss-and-grad", &TrainArgs::check_for_nan, "train on when the loss or the gradient norm is NaN/inf (default: stop)");
  flag("--check-for-nan-in-loss-and-grad", &TrainArgs::check_for_nan, "stop when the loss or the gradient norm is NaN/inf (the default)");
  // Megatron-DeepSpeed's activation-checkpointing switches (its tutorials pass them with
  // --checkpoint-activations): accepted, and what zerolm does instead is logged at start.
  auto note = [&](const char* name, const char* what) {
    m[name] = {Spec::Flag, [=](TrainArgs& a, const std::vector<std::string>&) { a.notes.push_back(std::string(name) + ": " + what); }, what};
  };
  note("--deepspeed-activation-checkpointing", "recomputation is zerolm's own (--checkpoint-activations), with the same RNG replay");
  note("--partition-activations", "checkpointed layer inputs are not split over tensor-parallel ranks (use --sequence-parallel to split them)");
  note("--contigious-checkpointing", "checkpointed layer inputs stay where autograd keeps them");
  note("--checkpoint-in-cpu", "checkpointed layer inputs stay on the training device");
  note("--synchronize-each-layer", "no extra synchronisation between layers");
  m["--seed"] = {Spec::Int, [](TrainArgs& a, const std::vector<std::string>& v) {
                   int64_t s = parse_int_flag("--seed", v[0]);
                   if (s < 0 || s > UINT32_MAX) throw Error(ErrorKind::Usage, "--seed must be in [0, 2^32)");
                   a.seed = static_cast<uint32_t>(s);
                 }, "random seed"};
  m["--data-path"] = {Spec::List, [](TrainArgs& a, const std::vector<std::string>& v) {
                        a.data_path.clear();
                        if (v.size() == 1) {
                          a.data_path.emplace_back(1.0, v[0]);
                          return;
                        }
                        if (v.size() % 2 != 0)
                          throw Error(ErrorKind::Usage, "--data-path: give one prefix, or weight prefix pairs (got %zu values)", v.size());
                        for (size_t i = 0; i < v.size(); i += 2) a.data_path.emplace_back(to_double("--data-path weight", v[i]), v[i + 1]);
                      }, "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (blend)"};
  m["--profile-ranks"] = {Spec::List, [](TrainArgs& a, const std::vector<std::string>& v) {
                            a.profile_ranks.clear();
                            for (const std::string& r : v) a.profile_ranks.push_back(parse_int_flag("--profile-ranks", r));
                          }, "the global ranks that profile (default 0)"};
  return m;
}

// The deepspeed launcher's options with no counterpart in pretrain_gpt's launcher: refused, saying which ones map.
const std::set<std::string>& deepspeed_launcher_only() {
  static const std::set<std::string> s = {
      "--include", "-i", "--exclude", "-e", "--launcher", "--launcher_args", "--module", "--no_python", "--no_local_rank",
      "--no_ssh_check", "--force_multi", "--save_pid", "--enable_each_rank_log", "--autotuning", "--elastic_training",
      "--min_elastic_nodes", "--max_elastic_nodes", "--bind_cores_to_rank", "--bind_core_list", "--ssh_port", "--venv_script",
      "--log_level", "--comment", "--account"};
  return s;
}

// Known Megatron flags that zerolm does not implement yet: a clear error, not a silent skip.
const std::set<std::string>& unsupported() {
  static const std::set<std::string> s = {
      "--recompute-granularity",
      "--recompute-method", "--use-flash-attn", "--position-embedding-type", "--swiglu", "--untie-embeddings-and-output-weights",
      "--ffn-hidden-size", "--kv-channels", "--group-query-attention", "--num-query-groups",
      "--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask", "--finetune",
      "--no-load-optim", "--no-load-rng", "--use-checkpoint-args", "--fp32-residual-connection", "--apply-query-key-layer-scaling",
      "--attention-softmax-in-fp32", "--DDP-impl", "--num-workers",
      "--lr-warmup-samples", "--lr-decay-samples", "--train-data-path", "--valid-data-path", "--test-data-path"};
  return s;
}

// The flag whose setting an alias writes (messages name the setting by its canonical flag).
const std::map<std::string, std::string>& canonical_names() {
  static const std::map<std::string, std::string> m = {
      {"--cpu-optimizer", "--cpu-offload"},       {"--deepspeed-config", "--deepspeed_config"}, {"--local_rank", "--local-rank"},
      {"--nproc_per_node", "--nproc-per-node"},   {"--num_gpus", "--nproc-per-node"},          {"--num_accelerators", "--nproc-per-node"},
      {"--num_nodes", "--nnodes"},                {"--node_rank", "--node-rank"},              {"--master_addr", "--master-addr"},
      {"--master_port", "--master-port"},         {"-H", "--hostfile"},
      {"--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad"}};
  return m;
}

std::string help_text(const std::map<std::string, Spec>& table) {
  std::string text = "pretrain_gpt: train GPT-2 on Megatron .bin/.idx data with Megatron-LM's pretrain_gpt.py flags.\n\n";
  for (const auto& [flag, spec] : table) text += "  " + flag + (spec.kind == Spec::Flag ? "" : " VALUE") + "\n      " + spec.help + "\n";
  return text +
         "\nEnvironment:\n"
         "  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun), SLURM_PROCID/SLURM_NTASKS/... (srun),\n"
         "  OMPI_COMM_WORLD_* (Open MPI), PMI_* (MPICH): this process is one rank of a data-parallel run\n"
         "  ZLM_CPU_MIXED_PRECISION=1: --bf16/--fp16 on CPU train in 16-bit instead of falling back to fp32\n"
         "  THP_MEM_ALLOC_ENABLE (LibTorch): CPU tensors of 2 MiB and more on transparent huge pages; pretrain_gpt\n"
         "      sets it to 1 unless it is set (0 turns it off)\n";
}

// A flag the table does not have: why, and what was probably meant.
[[noreturn]] void unknown_flag(const std::string& name, const std::map<std::string, Spec>& table) {
  if (deepspeed_launcher_only().count(name))
    throw Error(ErrorKind::Usage, "%s is a deepspeed launcher option that pretrain_gpt's launcher does not take (it maps --num_gpus, "
                "--num_nodes, --node_rank, --master_addr, --master_port, --hostfile and --no_ssh) ---> HINT: select GPUs with "
                "CUDA_VISIBLE_DEVICES; start other hosts with --nnodes/--node-rank, srun or mpirun", name.c_str());
  if (unsupported().count(name))
    throw Error(ErrorKind::Usage, "%s is a Megatron flag that zerolm's pretrain_gpt does not support yet", name.c_str());
  std::string prefixed;  // Megatron's parser sets allow_abbrev=False: a prefix is not its flag, but the hint names it
  for (const auto& [flag, spec] : table)
    if (name.size() > 2 && flag.rfind(name, 0) == 0) prefixed += (prefixed.empty() ? "" : " or ") + flag;
  if (!prefixed.empty())
    throw Error(ErrorKind::Usage, "unknown flag '%s': pretrain_gpt takes whole flag names, as Megatron-LM's arguments.py "
                "(allow_abbrev=False) ---> HINT: %s", name.c_str(), prefixed.c_str());
  throw Error(ErrorKind::Usage, "unknown flag '%s' ---> HINT: pretrain_gpt --help lists the supported flags", name.c_str());
}

// The values of the flag at argv[*i] ("--flag V", "--flag=V", a list up to the next "--"), moving *i past them.
std::vector<std::string> flag_values(const Spec& spec, const std::string& name, const std::optional<std::string>& inline_value, int argc,
                                     const char* const* argv, int* i) {
  std::vector<std::string> values;
  if (spec.kind == Spec::Flag) {
    if (inline_value) throw Error(ErrorKind::Usage, "%s takes no value", name.c_str());
  } else if (inline_value) {
    values.push_back(*inline_value);
  } else if (spec.kind == Spec::List) {
    while (*i + 1 < argc && std::string(argv[*i + 1]).rfind("--", 0) != 0) values.push_back(argv[++*i]);
  } else if (*i + 1 < argc) {
    values.push_back(argv[++*i]);
  }
  if (spec.kind != Spec::Flag && values.empty()) throw Error(ErrorKind::Usage, "%s needs a value", name.c_str());
  return values;
}

}  // namespace

int64_t parse_int_flag(const std::string& flag, const std::string& v) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size())
    throw Error(ErrorKind::Usage, "%s: '%s' is not an integer", flag.c_str(), v.c_str());
  return out;
}

TrainArgs parse_megatron_args(int argc, const char* const* argv, std::string* help) {
  const auto table = specs();
  TrainArgs a;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "--version") {
      a.version = true;
      return a;
    }
    if (name == "-q" || name == "--quiet" || name == "-v" || name == "--verbose") {
      (name == "-q" || name == "--quiet" ? a.quiet : a.verbose) = true;
      continue;
    }
    if (name == "--help" || name == "-h") {
      if (help) *help = help_text(table);
      return a;
    }
    auto it = table.find(name);
    if (it == table.end()) unknown_flag(name, table);
    const std::vector<std::string> values = flag_values(it->second, name, inline_value, argc, argv, &i);
    it->second.set(a, values);
    const auto alias = canonical_names().find(name);
    std::string as_typed = name;
    for (const auto& v : values) as_typed += " " + v;
    a.given[alias != canonical_names().end() ? alias->second : name] = as_typed;
  }
  return a;
}

double TrainArgs::warmup_samples() const {
  if (lr_warmup_iters > 0) return static_cast<double>(lr_warmup_iters * global_batch_size);
  if (lr_warmup_fraction > 0) return lr_warmup_fraction * static_cast<double>(decay_samples());
  return 0;
}

// megatron-core's OptimizerParamScheduler.get_lr once its num_steps is `samples` (the global
// batches of the updates taken), as it computes it: the order of operations is its own, so that
// the learning rate is Megatron's to the bit (also a warm-up that ends inside an iteration).
double megatron_lr(const TrainArgs& a, int64_t samples) {
  const double num_steps = static_cast<double>(samples);
  const double warmup = a.warmup_samples(), decay = static_cast<double>(a.decay_samples());
  if (warmup > 0 && num_steps <= warmup) return 0.0 + (a.lr - 0.0) * num_steps / warmup;
  if (a.lr_decay_style == "constant") return a.lr;
  if (num_steps > decay) return a.min_lr;
  const double ratio = (num_steps - warmup) / (decay - warmup);
  const double coeff = a.lr_decay_style == "cosine" ? 0.5 * (std::cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
  return a.min_lr + coeff * (a.lr - a.min_lr);
}

}  // namespace zlm::trainer
