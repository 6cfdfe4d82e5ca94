#include "trainer/deepspeed_config.h"

#include <cmath>
#include <set>

#include "common/core/error.h"
#include "trainer/json_object.h"

namespace zlm::trainer {

namespace {

// Reads one object's keys: every key known or inert (accepted, no effect: a note saying why).
void check(const JsonObjectView& obj, const std::set<std::string>& known, const std::set<std::string>& inert, const char* why_inert,
           DeepSpeedSettings& out) {
  for (const auto& k : obj.check_keys(known, inert)) out.notes.push_back(obj.name(k) + ": " + why_inert);
}

// offload_optimizer / offload_param: "cpu" or "none".
std::string offload_device(const JsonObjectView& obj, DeepSpeedSettings& out) {
  check(obj, {"device", "pin_memory"}, {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path", "fast_init", "ratio"},
        "NVMe and buffer tuning are not used; offload goes to (pinned) CPU memory", out);
  const std::string d = obj.has("device") ? obj.string("device") : "none";
  if (d != "cpu" && d != "none") obj.fail("device", "'" + d + "' is not supported (cpu or none)");
  return d;
}

// train_batch_size = micro * accumulation * data-parallel size, as DeepSpeed asserts (its engine
// divides the tensor and pipeline ranks out of the world).
void batch_sizes(const JsonObjectView& cfg, TrainArgs& a, int dp_size) {
  int64_t micro = a.micro_batch_size, global = a.global_batch_size;
  if (cfg.has("train_micro_batch_size_per_gpu")) {
    const int64_t m = cfg.integer("train_micro_batch_size_per_gpu");
    if (micro > 0 && m != micro)
      cfg.fail("train_micro_batch_size_per_gpu", strprintf("%ld disagrees with --micro-batch-size %ld", (long)m, (long)micro));
    micro = m;
  }
  if (cfg.has("train_batch_size")) {
    const int64_t g = cfg.integer("train_batch_size");
    if (global > 0 && global != micro && g != global)  // the parser defaults --global-batch-size to the micro batch
      cfg.fail("train_batch_size", strprintf("%ld disagrees with --global-batch-size %ld", (long)g, (long)global));
    global = g;
  }
  if (cfg.has("gradient_accumulation_steps")) {
    const int64_t acc = cfg.integer("gradient_accumulation_steps");
    if (!cfg.has("train_batch_size")) global = micro * acc * dp_size;
    if (global != micro * acc * dp_size)
      cfg.fail("gradient_accumulation_steps", strprintf("train_batch_size %ld != micro batch %ld * accumulation %ld * data-parallel size %d",
                                                        (long)global, (long)micro, (long)acc, dp_size));
  }
  if (micro <= 0 || global <= 0 || global % micro != 0)
    cfg.fail("train_batch_size", strprintf("%ld is not a multiple of the micro batch size %ld", (long)global, (long)micro));
  a.micro_batch_size = micro;
  a.global_batch_size = global;
}

void zero_optimization(const JsonObjectView& z, TrainArgs& a, DeepSpeedSettings& out) {
  check(z, {"stage", "cpu_offload", "cpu_offload_params", "offload_optimizer", "offload_param", "sub_group_size"},
        {"reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients", "reduce_scatter",
         "allgather_partitions", "round_robin_gradients", "load_from_fp32_weights", "elastic_checkpoint",
         "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
         "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
         "stage3_gather_fp16_weights_on_model_save", "cpu_offload_use_pin_memory", "ignore_unused_parameters",
         "use_multi_rank_bucket_allreduce"},
        "zerolm buckets by transformer block (one bucket = one block's parameters), reduces into contiguous "
        "buffers, gathers stage 3 parameters one bucket ahead (the embeddings and final LayerNorm are a bucket too), and saves full fp32 tensors",
        out);
  if (z.has("stage")) {
    const int64_t stage = z.integer("stage");
    if (stage < 0 || stage > 3) z.fail("stage", "must be 0, 1, 2 or 3");
    a.zero_stage = stage;
  }
  if (z.has("cpu_offload") && z.boolean("cpu_offload")) a.cpu_offload = true;
  if (z.has("offload_optimizer") && offload_device(z.object("offload_optimizer"), out) == "cpu") a.cpu_offload = true;
  if (z.has("offload_param") && offload_device(z.object("offload_param"), out) == "cpu") {
    if (a.zero_stage != 3) z.fail("offload_param", "needs stage 3 (only stage 3 shards parameters)");
    a.offload_params = true;
  }
  if (z.has("cpu_offload_params") && z.boolean("cpu_offload_params")) {  // DeepSpeed 0.3's parameter offload
    if (a.zero_stage != 3) z.fail("cpu_offload_params", "needs stage 3 (only stage 3 shards parameters)");
    a.offload_params = a.cpu_offload = true;
  }
  if (z.has("sub_group_size")) {
    out.offload_chunk = z.integer("sub_group_size");
    if (out.offload_chunk <= 0) z.fail("sub_group_size", "must be positive");
  }
}

void precision(const JsonObjectView& cfg, TrainArgs& a, DeepSpeedSettings& out) {
  if (cfg.has("fp16")) {
    const JsonObjectView f = cfg.object("fp16");
    check(f, {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"},
          {"auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads"},
          "zerolm's fp16 is fp16 parameters with fp32 master weights and Megatron's scaler", out);
    if (f.has("enabled") && f.boolean("enabled")) a.fp16 = true;
    if (f.has("loss_scale")) a.loss_scale = f.number("loss_scale");
    if (f.has("initial_scale_power")) a.initial_loss_scale = std::ldexp(1.0, static_cast<int>(f.integer("initial_scale_power")));
    if (f.has("loss_scale_window")) a.loss_scale_window = f.integer("loss_scale_window");
    if (f.has("hysteresis")) a.hysteresis = f.integer("hysteresis");
    if (f.has("min_loss_scale")) a.min_loss_scale = f.number("min_loss_scale");
  }
  if (cfg.has("bf16")) {
    const JsonObjectView b = cfg.object("bf16");
    check(b, {"enabled"}, {"immediate_grad_update", "check_grad_overflow"}, "bf16 needs no loss scaling in zerolm", out);
    if (b.has("enabled") && b.boolean("enabled")) a.bf16 = true;
  }
  if (a.fp16 && a.bf16) cfg.fail("fp16", "fp16 and bf16 are both enabled");
  // The dtype gradients are reduced (and, in zerolm, accumulated) in; DeepSpeed's default is the parameters'.
  if (cfg.has("communication_data_type")) {
    const std::string t = cfg.string("communication_data_type");
    if (t == "fp32" || t == "float32") a.grad_reduce_dtype = "fp32";
    else if (t == "fp16" || t == "float16") a.grad_reduce_dtype = "fp16";
    else if (t == "bf16" || t == "bfloat16") a.grad_reduce_dtype = "bf16";
    else cfg.fail("communication_data_type", "must be \"fp32\", \"fp16\" or \"bf16\"");
  }
}

void optimizer(const JsonObjectView& o, TrainArgs& a, DeepSpeedSettings& out) {
  check(o, {"type", "params"}, {}, "", out);
  const std::string type = o.has("type") ? o.string("type") : "AdamW";
  if (type != "Adam" && type != "AdamW" && type != "adam" && type != "adamw")
    o.fail("type", "'" + type + "': zerolm trains with AdamW (decoupled weight decay, like Megatron's Adam)");
  if (!o.has("params")) return;
  const JsonObjectView p = o.object("params");
  check(p, {"lr", "betas", "eps", "weight_decay"}, {"torch_adam", "adam_w_mode", "bias_correction"},
        "zerolm's AdamW is the fused LibTorch kernel with bias correction", out);
  if (p.has("lr")) a.lr = p.number("lr");
  if (p.has("eps")) a.adam_eps = p.number("eps");
  if (p.has("weight_decay")) a.weight_decay = p.number("weight_decay");
  if (p.has("betas")) {
    const std::vector<double> betas = p.numbers("betas");
    if (betas.size() != 2) p.fail("betas", "must be [beta1, beta2]");
    a.adam_beta1 = betas[0];
    a.adam_beta2 = betas[1];
  }
}

}  // namespace

bool deepspeed_config_supported() { return json_settings_supported(); }

DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, const std::string& path, int dp_size) {
  DeepSpeedSettings out;
  const JsonObjectView cfg = read_json_object(path);
  check(cfg, {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
              "zero_optimization", "fp16", "bf16", "optimizer", "communication_data_type"},
        {"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "prescale_gradients",
         "gradient_predivide_factor", "tensorboard", "flops_profiler", "activation_checkpointing", "memory_breakdown", "dump_state"},
        "DeepSpeed logging/profiling or communication tuning; zerolm logs in Megatron's format and "
        "takes activation checkpointing from --checkpoint-activations",
        out);
  batch_sizes(cfg, a, dp_size);
  if (cfg.has("gradient_clipping")) a.clip_grad = cfg.number("gradient_clipping");
  if (cfg.has("zero_optimization")) zero_optimization(cfg.object("zero_optimization"), a, out);
  precision(cfg, a, out);
  if (cfg.has("optimizer")) optimizer(cfg.object("optimizer"), a, out);
  if (a.offload_params && a.zero_stage != 3) throw Error(ErrorKind::Usage, "%s: offload_param needs zero_optimization.stage 3", path.c_str());
  return out;
}

}  // namespace zlm::trainer
