#include "trainer/config/deepspeed_config.h"

#include <cmath>
#include <set>
#include <string>

#include "common/core/error.h"
#include "trainer/config/json_object.h"

namespace zlm::trainer {

namespace {

std::string shown(bool v) { return v ? "true" : "false"; }
std::string shown(int64_t v) { return std::to_string(v); }
std::string shown(double v) { return strprintf("%g", v); }
std::string shown(const std::string& v) { return "\"" + v + "\""; }

// The JSON's values into the settings: one that the command line also gives
// must be the same there; the origin of each is recorded for later messages.
struct Merge {
  TrainArgs& a;
  Origins& origins;
  DeepSpeedSettings& out;
  template <class T>
  void set(const JsonObjectView& obj, const std::string& key, const char* flag, T TrainArgs::*field, T value) {
    if (origins.on_command_line(flag) && !(a.*field == value))
      obj.fail(key, shown(value) + " disagrees with " + origins.describe(flag) + " (give the setting once, or the same value both ways)");
    a.*field = value;
    origins.from_file(flag, obj.path() + ": " + obj.name(key) + " " + shown(value));
  }
  // Every key of `obj` known or inert (accepted, no effect: a note saying why).
  void check(const JsonObjectView& obj, const std::set<std::string>& known, const std::set<std::string>& inert, const char* why_inert) {
    for (const auto& k : obj.check_keys(known, inert)) out.notes.push_back(obj.name(k) + ": " + why_inert);
  }
};

// offload_optimizer / offload_param: "cpu" (true) or "none" (false).
bool offload_to_cpu(Merge& m, const JsonObjectView& obj) {
  m.check(obj, {"device", "pin_memory"}, {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path", "fast_init", "ratio"},
          "NVMe and buffer tuning are not used; offload goes to (pinned) CPU memory");
  const std::string d = obj.has("device") ? obj.string("device") : "none";
  if (d != "cpu" && d != "none") obj.fail("device", "'" + d + "' is not supported (cpu or none)");
  return d == "cpu";
}

// train_batch_size = micro * accumulation * data-parallel size, as DeepSpeed asserts (its engine
// divides the tensor and pipeline ranks out of the world): any two give the third.
void batch_sizes(Merge& m, const JsonObjectView& cfg, int dp_size) {
  if (cfg.has("train_micro_batch_size_per_gpu"))
    m.set(cfg, "train_micro_batch_size_per_gpu", "--micro-batch-size", &TrainArgs::micro_batch_size, cfg.integer("train_micro_batch_size_per_gpu"));
  if (cfg.has("train_batch_size")) m.set(cfg, "train_batch_size", "--global-batch-size", &TrainArgs::global_batch_size, cfg.integer("train_batch_size"));
  if (!cfg.has("gradient_accumulation_steps")) return;
  const int64_t acc = cfg.integer("gradient_accumulation_steps"), micro = m.a.micro_batch_size;
  if (!m.origins.given("--global-batch-size"))
    m.set(cfg, "gradient_accumulation_steps", "--global-batch-size", &TrainArgs::global_batch_size, micro * acc * dp_size);
  if (m.a.global_batch_size != micro * acc * dp_size)
    cfg.fail("gradient_accumulation_steps", strprintf("train_batch_size %ld != micro batch %ld * accumulation %ld * data-parallel size %d",
                                                      (long)m.a.global_batch_size, (long)micro, (long)acc, dp_size));
}

void zero_optimization(Merge& m, const JsonObjectView& z) {
  m.check(z, {"stage", "cpu_offload", "cpu_offload_params", "offload_optimizer", "offload_param", "sub_group_size"},
          {"reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients", "reduce_scatter",
           "allgather_partitions", "round_robin_gradients", "load_from_fp32_weights", "elastic_checkpoint",
           "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
           "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
           "stage3_gather_fp16_weights_on_model_save", "cpu_offload_use_pin_memory", "ignore_unused_parameters",
           "use_multi_rank_bucket_allreduce"},
          "zerolm buckets by transformer block (one bucket = one block's parameters), reduces into contiguous "
          "buffers, gathers stage 3 parameters one bucket ahead (the embeddings and final LayerNorm are a bucket too), and saves full fp32 tensors");
  if (z.has("stage")) m.set(z, "stage", "--zero-stage", &TrainArgs::zero_stage, z.integer("stage"));
  if (z.has("cpu_offload")) m.set(z, "cpu_offload", "--cpu-offload", &TrainArgs::cpu_offload, z.boolean("cpu_offload"));
  if (z.has("offload_optimizer"))
    m.set(z, "offload_optimizer", "--cpu-offload", &TrainArgs::cpu_offload, offload_to_cpu(m, z.object("offload_optimizer")));
  if (z.has("offload_param")) m.set(z, "offload_param", "--offload-params", &TrainArgs::offload_params, offload_to_cpu(m, z.object("offload_param")));
  if (z.has("cpu_offload_params"))  // DeepSpeed 0.3's spelling of offload_param
    m.set(z, "cpu_offload_params", "--offload-params", &TrainArgs::offload_params, z.boolean("cpu_offload_params"));
  if (z.has("sub_group_size")) {
    m.out.offload_chunk = z.integer("sub_group_size");
    if (m.out.offload_chunk <= 0) z.fail("sub_group_size", "must be positive");
  }
}

void precision(Merge& m, const JsonObjectView& cfg) {
  if (cfg.has("fp16")) {
    const JsonObjectView f = cfg.object("fp16");
    m.check(f, {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"},
            {"auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads"},
            "zerolm's fp16 is fp16 parameters with fp32 master weights and Megatron's scaler");
    if (f.has("enabled")) m.set(f, "enabled", "--fp16", &TrainArgs::fp16, f.boolean("enabled"));
    if (f.has("loss_scale")) m.set(f, "loss_scale", "--loss-scale", &TrainArgs::loss_scale, f.number("loss_scale"));
    if (f.has("initial_scale_power")) {
      const int64_t power = f.integer("initial_scale_power");
      if (power < 0 || power > 64) f.fail("initial_scale_power", strprintf("%ld is outside [0, 64]", (long)power));
      m.set(f, "initial_scale_power", "--initial-loss-scale", &TrainArgs::initial_loss_scale, std::ldexp(1.0, static_cast<int>(power)));
    }
    if (f.has("loss_scale_window")) m.set(f, "loss_scale_window", "--loss-scale-window", &TrainArgs::loss_scale_window, f.integer("loss_scale_window"));
    if (f.has("hysteresis")) m.set(f, "hysteresis", "--hysteresis", &TrainArgs::hysteresis, f.integer("hysteresis"));
    if (f.has("min_loss_scale")) m.set(f, "min_loss_scale", "--min-loss-scale", &TrainArgs::min_loss_scale, f.number("min_loss_scale"));
  }
  if (cfg.has("bf16")) {
    const JsonObjectView b = cfg.object("bf16");
    m.check(b, {"enabled"}, {"immediate_grad_update", "check_grad_overflow"}, "bf16 needs no loss scaling in zerolm");
    if (b.has("enabled")) m.set(b, "enabled", "--bf16", &TrainArgs::bf16, b.boolean("enabled"));
  }
  // The dtype gradients are reduced (and, in zerolm, accumulated) in; DeepSpeed's default is the parameters'.
  if (cfg.has("communication_data_type")) {
    const std::string t = cfg.string("communication_data_type");
    const std::string dtype = t == "fp32" || t == "float32" ? "fp32" : t == "fp16" || t == "float16" ? "fp16" : t == "bf16" || t == "bfloat16" ? "bf16" : "";
    if (dtype.empty()) cfg.fail("communication_data_type", "must be \"fp32\", \"fp16\" or \"bf16\"");
    m.set(cfg, "communication_data_type", "--accumulate-allreduce-grads-in-fp32", &TrainArgs::grad_reduce_dtype, dtype);
  }
}

void optimizer(Merge& m, const JsonObjectView& o) {
  m.check(o, {"type", "params"}, {}, "");
  const std::string type = o.has("type") ? o.string("type") : "AdamW";
  if (type != "Adam" && type != "AdamW" && type != "adam" && type != "adamw")
    o.fail("type", "'" + type + "': zerolm trains with AdamW (decoupled weight decay, like Megatron's Adam)");
  if (!o.has("params")) return;
  const JsonObjectView p = o.object("params");
  m.check(p, {"lr", "betas", "eps", "weight_decay"}, {"torch_adam", "adam_w_mode", "bias_correction"},
          "zerolm's AdamW is the fused LibTorch kernel with bias correction");
  if (p.has("lr")) m.set(p, "lr", "--lr", &TrainArgs::lr, p.number("lr"));
  if (p.has("eps")) m.set(p, "eps", "--adam-eps", &TrainArgs::adam_eps, p.number("eps"));
  if (p.has("weight_decay")) m.set(p, "weight_decay", "--weight-decay", &TrainArgs::weight_decay, p.number("weight_decay"));
  if (p.has("betas")) {
    const std::vector<double> betas = p.numbers("betas");
    if (betas.size() != 2) p.fail("betas", "must be [beta1, beta2]");
    m.set(p, "betas", "--adam-beta1", &TrainArgs::adam_beta1, betas[0]);
    m.set(p, "betas", "--adam-beta2", &TrainArgs::adam_beta2, betas[1]);
  }
}

}  // namespace

bool deepspeed_config_supported() { return json_settings_supported(); }

DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, Origins& origins, const std::string& path, int dp_size) {
  DeepSpeedSettings out;
  Merge m{a, origins, out};
  const JsonObjectView cfg = read_json_object(path, RepeatedKeys::kRefuse);  // DeepSpeed's reader refuses a repeated key
  m.check(cfg, {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
                "zero_optimization", "fp16", "bf16", "optimizer", "communication_data_type"},
          {"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "prescale_gradients",
           "gradient_predivide_factor", "tensorboard", "flops_profiler", "activation_checkpointing", "memory_breakdown", "dump_state"},
          "DeepSpeed logging/profiling or communication tuning; zerolm logs in Megatron's format and "
          "takes activation checkpointing from --checkpoint-activations");
  batch_sizes(m, cfg, dp_size);
  if (cfg.has("gradient_clipping")) m.set(cfg, "gradient_clipping", "--clip-grad", &TrainArgs::clip_grad, cfg.number("gradient_clipping"));
  if (cfg.has("zero_optimization")) zero_optimization(m, cfg.object("zero_optimization"));
  precision(m, cfg);
  if (cfg.has("optimizer")) optimizer(m, cfg.object("optimizer"));
  return out;
}

}  // namespace zlm::trainer
