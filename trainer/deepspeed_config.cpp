#include "trainer/deepspeed_config.h"

#include <cmath>
#include <set>

#include "common/core/error.h"
#include "common/core/output_file.h"

#ifdef ZLM_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

namespace zlm::trainer {

#ifdef ZLM_HAVE_NLOHMANN_JSON

namespace {

using nlohmann::json;

struct Reader {
  const std::string& path;
  DeepSpeedSettings& out;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error(ErrorKind::Usage, "%s: %s: %s", path.c_str(), key.c_str(), why.c_str());
  }
  // Every key of `obj` must be in `known` or `inert` (accepted, no effect: a note).
  void keys(const json& obj, const std::string& where, const std::set<std::string>& known,
            const std::set<std::string>& inert, const char* why_inert) const {
    if (!obj.is_object()) fail(where, "must be a JSON object");
    for (const auto& [k, v] : obj.items()) {
      if (known.count(k)) continue;
      if (inert.count(k)) {
        out.notes.push_back(where + "." + k + ": " + why_inert);
        continue;
      }
      fail(where.empty() ? k : where + "." + k, "not a DeepSpeed setting zerolm knows (unsupported or misspelt)");
    }
  }
  double number(const json& obj, const std::string& where, const char* key) const {
    const json& v = obj.at(key);
    if (!v.is_number()) fail(where + "." + key, "must be a number");
    return v.get<double>();
  }
  int64_t integer(const json& obj, const std::string& where, const char* key) const {
    double d = number(obj, where, key);
    if (d != std::floor(d)) fail(where + "." + key, "must be an integer");
    return static_cast<int64_t>(d);
  }
  bool boolean(const json& obj, const std::string& where, const char* key) const {
    const json& v = obj.at(key);
    if (!v.is_boolean()) fail(where + "." + key, "must be true or false");
    return v.get<bool>();
  }
  std::string device(const json& obj, const std::string& where) const {
    if (!obj.is_object()) fail(where, "must be a JSON object");
    keys(obj, where, {"device", "pin_memory"}, {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path", "fast_init", "ratio"},
         "NVMe and buffer tuning are not used; offload goes to (pinned) CPU memory");
    std::string d = obj.contains("device") ? obj.at("device").get<std::string>() : "none";
    if (d != "cpu" && d != "none") fail(where + ".device", "'" + d + "' is not supported (cpu or none)");
    return d;
  }
};

}  // namespace

bool deepspeed_config_supported() { return true; }

DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, const std::string& path, int dp_size) {
  DeepSpeedSettings out;
  Reader r{path, out};
  json cfg;
  try {
    cfg = json::parse(read_file(path));
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::Format, "%s: not valid JSON (byte %zu): %s", path.c_str(), static_cast<size_t>(e.byte), e.what());
  }
  try {
    r.keys(cfg, "", {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
                     "zero_optimization", "fp16", "bf16", "optimizer", "communication_data_type"},
           {"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "prescale_gradients",
            "gradient_predivide_factor", "tensorboard", "flops_profiler", "activation_checkpointing",
            "memory_breakdown", "dump_state"},
           "DeepSpeed logging/profiling or communication tuning; zerolm logs in Megatron's format and "
           "takes activation checkpointing from --checkpoint-activations");
    // Batch sizes: DeepSpeed requires train_batch_size = micro * accumulation * data-parallel size
    // (its engine divides the tensor and pipeline ranks out of the world).
    int64_t micro = a.micro_batch_size, global = a.global_batch_size;
    if (cfg.contains("train_micro_batch_size_per_gpu")) {
      int64_t m = r.integer(cfg, "", "train_micro_batch_size_per_gpu");
      if (micro > 0 && m != micro) r.fail("train_micro_batch_size_per_gpu", strprintf("%ld disagrees with --micro-batch-size %ld", (long)m, (long)micro));
      micro = m;
    }
    if (cfg.contains("train_batch_size")) {
      int64_t g = r.integer(cfg, "", "train_batch_size");
      if (global > 0 && global != micro && g != global)  // the parser defaults --global-batch-size to the micro batch
        r.fail("train_batch_size", strprintf("%ld disagrees with --global-batch-size %ld", (long)g, (long)global));
      global = g;
    }
    if (cfg.contains("gradient_accumulation_steps")) {
      int64_t acc = r.integer(cfg, "", "gradient_accumulation_steps");
      if (!cfg.contains("train_batch_size")) global = micro * acc * dp_size;
      if (global != micro * acc * dp_size)
        r.fail("gradient_accumulation_steps", strprintf("train_batch_size %ld != micro batch %ld * accumulation %ld * data-parallel size %d",
                                                        (long)global, (long)micro, (long)acc, dp_size));
    }
    if (micro <= 0 || global <= 0 || global % micro != 0)
      r.fail("train_batch_size", strprintf("%ld is not a multiple of the micro batch size %ld", (long)global, (long)micro));
    a.micro_batch_size = micro;
    a.global_batch_size = global;
    if (cfg.contains("gradient_clipping")) a.clip_grad = r.number(cfg, "", "gradient_clipping");

    if (cfg.contains("zero_optimization")) {
      const json& z = cfg.at("zero_optimization");
      const std::string w = "zero_optimization";
      r.keys(z, w, {"stage", "cpu_offload", "offload_optimizer", "offload_param", "sub_group_size"},
             {"reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients", "reduce_scatter",
              "allgather_partitions", "round_robin_gradients", "load_from_fp32_weights", "elastic_checkpoint",
              "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
              "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
              "stage3_gather_fp16_weights_on_model_save", "cpu_offload_params", "cpu_offload_use_pin_memory",
              "ignore_unused_parameters", "use_multi_rank_bucket_allreduce"},
             "zerolm buckets by transformer block (one bucket = one block's parameters), reduces into contiguous "
             "buffers, gathers stage 3 parameters one bucket ahead (the embeddings and final LayerNorm are a bucket too), and saves full fp32 tensors");
      if (z.contains("stage")) {
        int64_t s = r.integer(z, w, "stage");
        if (s < 0 || s > 3) r.fail(w + ".stage", "must be 0, 1, 2 or 3");
        a.zero_stage = s;
      }
      if (z.contains("cpu_offload") && r.boolean(z, w, "cpu_offload")) a.cpu_offload = true;
      if (z.contains("offload_optimizer") && r.device(z.at("offload_optimizer"), w + ".offload_optimizer") == "cpu") a.cpu_offload = true;
      if (z.contains("offload_param") && r.device(z.at("offload_param"), w + ".offload_param") == "cpu") {
        if (a.zero_stage != 3) r.fail(w + ".offload_param", "needs stage 3 (only stage 3 shards parameters)");
        a.offload_params = true;
      }
      if (z.contains("sub_group_size")) {
        out.offload_chunk = r.integer(z, w, "sub_group_size");
        if (out.offload_chunk <= 0) r.fail(w + ".sub_group_size", "must be positive");
      }
    }
    if (cfg.contains("fp16")) {
      const json& f = cfg.at("fp16");
      r.keys(f, "fp16", {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"},
             {"auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads"},
             "zerolm's fp16 is fp16 parameters with fp32 master weights and Megatron's scaler");
      if (f.contains("enabled") && r.boolean(f, "fp16", "enabled")) a.fp16 = true;
      if (f.contains("loss_scale")) a.loss_scale = r.number(f, "fp16", "loss_scale");
      if (f.contains("initial_scale_power")) a.initial_loss_scale = std::ldexp(1.0, static_cast<int>(r.integer(f, "fp16", "initial_scale_power")));
      if (f.contains("loss_scale_window")) a.loss_scale_window = r.integer(f, "fp16", "loss_scale_window");
      if (f.contains("hysteresis")) a.hysteresis = r.integer(f, "fp16", "hysteresis");
      if (f.contains("min_loss_scale")) a.min_loss_scale = r.number(f, "fp16", "min_loss_scale");
    }
    if (cfg.contains("bf16")) {
      const json& b = cfg.at("bf16");
      r.keys(b, "bf16", {"enabled"}, {"immediate_grad_update", "check_grad_overflow"}, "bf16 needs no loss scaling in zerolm");
      if (b.contains("enabled") && r.boolean(b, "bf16", "enabled")) a.bf16 = true;
    }
    if (a.fp16 && a.bf16) r.fail("fp16", "fp16 and bf16 are both enabled");
    // The dtype gradients are reduced (and, in zerolm, accumulated) in; DeepSpeed's default is the parameters'.
    if (cfg.contains("communication_data_type")) {
      const json& c = cfg.at("communication_data_type");
      const std::string t = c.is_string() ? c.get<std::string>() : "";
      if (t == "fp32" || t == "float32") a.grad_reduce_dtype = "fp32";
      else if (t == "fp16" || t == "float16") a.grad_reduce_dtype = "fp16";
      else if (t == "bf16" || t == "bfloat16") a.grad_reduce_dtype = "bf16";
      else r.fail("communication_data_type", "must be \"fp32\", \"fp16\" or \"bf16\"");
    }
    if (cfg.contains("optimizer")) {
      const json& o = cfg.at("optimizer");
      r.keys(o, "optimizer", {"type", "params"}, {}, "");
      std::string type = o.contains("type") ? o.at("type").get<std::string>() : "AdamW";
      if (type != "Adam" && type != "AdamW" && type != "adam" && type != "adamw")
        r.fail("optimizer.type", "'" + type + "': zerolm trains with AdamW (decoupled weight decay, like Megatron's Adam)");
      if (o.contains("params")) {
        const json& p = o.at("params");
        r.keys(p, "optimizer.params", {"lr", "betas", "eps", "weight_decay"}, {"torch_adam", "adam_w_mode", "bias_correction"},
               "zerolm's AdamW is the fused LibTorch kernel with bias correction");
        if (p.contains("lr")) a.lr = r.number(p, "optimizer.params", "lr");
        if (p.contains("eps")) a.adam_eps = r.number(p, "optimizer.params", "eps");
        if (p.contains("weight_decay")) a.weight_decay = r.number(p, "optimizer.params", "weight_decay");
        if (p.contains("betas")) {
          const json& b = p.at("betas");
          if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number()) r.fail("optimizer.params.betas", "must be [beta1, beta2]");
          a.adam_beta1 = b[0].get<double>();
          a.adam_beta2 = b[1].get<double>();
        }
      }
    }
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Usage, "%s: %s", path.c_str(), e.what());
  }
  if (a.offload_params && a.zero_stage != 3) throw Error(ErrorKind::Usage, "%s: offload_param needs zero_optimization.stage 3", path.c_str());
  return out;
}

#else

bool deepspeed_config_supported() { return false; }

DeepSpeedSettings apply_deepspeed_config(TrainArgs&, const std::string& path, int) {
  throw Error(ErrorKind::Usage, "%s: this build reads no DeepSpeed JSON (built without nlohmann-json3-dev); use --zero-stage and --cpu-offload",
              path.c_str());
}

#endif

}  // namespace zlm::trainer
