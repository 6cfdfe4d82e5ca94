#include "trainer/deepspeed_config.h"

#include <cmath>
#include <functional>
#include <set>

#include "common/core/error.h"
#include "common/core/output_file.h"

#ifdef ZLM_HAVE_SIMDJSON
#include <simdjson.h>
#endif

namespace zlm::trainer {

#ifdef ZLM_HAVE_SIMDJSON

namespace {

using simdjson::dom::element;

// Where a document simdjson's DOM parser refused goes wrong, as "line L,
// column C" (empty when it cannot tell): the on-demand parser walks it value
// by value and stops at the first bad one.
std::string error_location(const simdjson::padded_string& text) {
  namespace od = simdjson::ondemand;
  std::function<simdjson::error_code(od::value)> walk = [&](od::value v) -> simdjson::error_code {
    od::json_type t;
    if (auto e = v.type().get(t)) return e;
    if (t == od::json_type::object) {
      for (auto field : v.get_object()) {
        od::value inner;
        if (auto e = field.value().get(inner)) return e;
        if (auto e = walk(inner)) return e;
      }
      return simdjson::SUCCESS;
    }
    if (t == od::json_type::array) {
      for (auto item : v.get_array()) {
        od::value inner;
        if (auto e = item.get(inner)) return e;
        if (auto e = walk(inner)) return e;
      }
      return simdjson::SUCCESS;
    }
    if (t == od::json_type::string) return v.get_string().error();
    if (t == od::json_type::number) return v.get_double().error();
    if (t == od::json_type::boolean) return v.get_bool().error();
    return v.is_null().error();
  };
  od::parser parser;
  od::document doc;
  od::value root;
  const char* at = nullptr;
  if (parser.iterate(text).get(doc)) return "";
  if ((!doc.get_value().get(root) && !walk(root)) || doc.current_location().get(at)) return "";  // nothing found, or at the end
  size_t line = 1, column = 1;
  for (const char* c = text.data(); c < at; ++c) {
    if (*c == '\n') ++line, column = 1;
    else ++column;
  }
  return strprintf(" at line %zu, column %zu", line, column);
}

struct Reader {
  const std::string& path;
  DeepSpeedSettings& out;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error(ErrorKind::Usage, "%s: %s: %s", path.c_str(), key.c_str(), why.c_str());
  }
  static bool has(element obj, const char* key) { return obj.is_object() && obj[key].error() == simdjson::SUCCESS; }
  static element at(element obj, const char* key) { return obj[key].value_unsafe(); }  // after has()
  // Every key of `obj` must be in `known` or `inert` (accepted, no effect: a note).
  void keys(element obj, const std::string& where, const std::set<std::string>& known, const std::set<std::string>& inert,
            const char* why_inert) const {
    simdjson::dom::object o;
    if (obj.get_object().get(o)) fail(where, "must be a JSON object");
    for (auto [key, value] : o) {
      const std::string k(key);
      if (known.count(k)) continue;
      if (inert.count(k)) {
        out.notes.push_back(where + "." + k + ": " + why_inert);
        continue;
      }
      fail(where.empty() ? k : where + "." + k, "not a DeepSpeed setting zerolm knows (unsupported or misspelt)");
    }
  }
  static std::string name(const std::string& where, const char* key) { return where.empty() ? std::string(key) : where + "." + key; }
  double number(element obj, const std::string& where, const char* key) const {
    double d;
    if (!at(obj, key).is_number() || at(obj, key).get_double().get(d)) fail(name(where, key), "must be a number");
    return d;
  }
  int64_t integer(element obj, const std::string& where, const char* key) const {
    double d = number(obj, where, key);
    if (d != std::floor(d)) fail(name(where, key), "must be an integer");
    return static_cast<int64_t>(d);
  }
  bool boolean(element obj, const std::string& where, const char* key) const {
    bool b;
    if (at(obj, key).get_bool().get(b)) fail(name(where, key), "must be true or false");
    return b;
  }
  std::string string(element obj, const std::string& where, const char* key) const {
    std::string_view v;
    if (at(obj, key).get_string().get(v)) fail(name(where, key), "must be a string");
    return std::string(v);
  }
  std::string device(element obj, const std::string& where) const {
    keys(obj, where, {"device", "pin_memory"}, {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path", "fast_init", "ratio"},
         "NVMe and buffer tuning are not used; offload goes to (pinned) CPU memory");
    std::string d = has(obj, "device") ? string(obj, where, "device") : "none";
    if (d != "cpu" && d != "none") fail(where + ".device", "'" + d + "' is not supported (cpu or none)");
    return d;
  }
};

}  // namespace

bool deepspeed_config_supported() { return true; }

DeepSpeedSettings apply_deepspeed_config(TrainArgs& a, const std::string& path, int dp_size) {
  DeepSpeedSettings out;
  Reader r{path, out};
  const simdjson::padded_string text(read_file(path));
  simdjson::dom::parser parser;
  element cfg;
  if (auto err = parser.parse(text).get(cfg))
    throw Error(ErrorKind::Format, "%s: not valid JSON%s: %s", path.c_str(), error_location(text).c_str(), simdjson::error_message(err));
  {
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
    if (r.has(cfg, "train_micro_batch_size_per_gpu")) {
      int64_t m = r.integer(cfg, "", "train_micro_batch_size_per_gpu");
      if (micro > 0 && m != micro) r.fail("train_micro_batch_size_per_gpu", strprintf("%ld disagrees with --micro-batch-size %ld", (long)m, (long)micro));
      micro = m;
    }
    if (r.has(cfg, "train_batch_size")) {
      int64_t g = r.integer(cfg, "", "train_batch_size");
      if (global > 0 && global != micro && g != global)  // the parser defaults --global-batch-size to the micro batch
        r.fail("train_batch_size", strprintf("%ld disagrees with --global-batch-size %ld", (long)g, (long)global));
      global = g;
    }
    if (r.has(cfg, "gradient_accumulation_steps")) {
      int64_t acc = r.integer(cfg, "", "gradient_accumulation_steps");
      if (!r.has(cfg, "train_batch_size")) global = micro * acc * dp_size;
      if (global != micro * acc * dp_size)
        r.fail("gradient_accumulation_steps", strprintf("train_batch_size %ld != micro batch %ld * accumulation %ld * data-parallel size %d",
                                                        (long)global, (long)micro, (long)acc, dp_size));
    }
    if (micro <= 0 || global <= 0 || global % micro != 0)
      r.fail("train_batch_size", strprintf("%ld is not a multiple of the micro batch size %ld", (long)global, (long)micro));
    a.micro_batch_size = micro;
    a.global_batch_size = global;
    if (r.has(cfg, "gradient_clipping")) a.clip_grad = r.number(cfg, "", "gradient_clipping");

    if (r.has(cfg, "zero_optimization")) {
      const element z = r.at(cfg, "zero_optimization");
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
      if (r.has(z, "stage")) {
        int64_t s = r.integer(z, w, "stage");
        if (s < 0 || s > 3) r.fail(w + ".stage", "must be 0, 1, 2 or 3");
        a.zero_stage = s;
      }
      if (r.has(z, "cpu_offload") && r.boolean(z, w, "cpu_offload")) a.cpu_offload = true;
      if (r.has(z, "offload_optimizer") && r.device(r.at(z, "offload_optimizer"), w + ".offload_optimizer") == "cpu") a.cpu_offload = true;
      if (r.has(z, "offload_param") && r.device(r.at(z, "offload_param"), w + ".offload_param") == "cpu") {
        if (a.zero_stage != 3) r.fail(w + ".offload_param", "needs stage 3 (only stage 3 shards parameters)");
        a.offload_params = true;
      }
      if (r.has(z, "sub_group_size")) {
        out.offload_chunk = r.integer(z, w, "sub_group_size");
        if (out.offload_chunk <= 0) r.fail(w + ".sub_group_size", "must be positive");
      }
    }
    if (r.has(cfg, "fp16")) {
      const element f = r.at(cfg, "fp16");
      r.keys(f, "fp16", {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"},
             {"auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads"},
             "zerolm's fp16 is fp16 parameters with fp32 master weights and Megatron's scaler");
      if (r.has(f, "enabled") && r.boolean(f, "fp16", "enabled")) a.fp16 = true;
      if (r.has(f, "loss_scale")) a.loss_scale = r.number(f, "fp16", "loss_scale");
      if (r.has(f, "initial_scale_power")) a.initial_loss_scale = std::ldexp(1.0, static_cast<int>(r.integer(f, "fp16", "initial_scale_power")));
      if (r.has(f, "loss_scale_window")) a.loss_scale_window = r.integer(f, "fp16", "loss_scale_window");
      if (r.has(f, "hysteresis")) a.hysteresis = r.integer(f, "fp16", "hysteresis");
      if (r.has(f, "min_loss_scale")) a.min_loss_scale = r.number(f, "fp16", "min_loss_scale");
    }
    if (r.has(cfg, "bf16")) {
      const element b = r.at(cfg, "bf16");
      r.keys(b, "bf16", {"enabled"}, {"immediate_grad_update", "check_grad_overflow"}, "bf16 needs no loss scaling in zerolm");
      if (r.has(b, "enabled") && r.boolean(b, "bf16", "enabled")) a.bf16 = true;
    }
    if (a.fp16 && a.bf16) r.fail("fp16", "fp16 and bf16 are both enabled");
    // The dtype gradients are reduced (and, in zerolm, accumulated) in; DeepSpeed's default is the parameters'.
    if (r.has(cfg, "communication_data_type")) {
      std::string_view t;
      if (r.at(cfg, "communication_data_type").get_string().get(t)) t = "";
      if (t == "fp32" || t == "float32") a.grad_reduce_dtype = "fp32";
      else if (t == "fp16" || t == "float16") a.grad_reduce_dtype = "fp16";
      else if (t == "bf16" || t == "bfloat16") a.grad_reduce_dtype = "bf16";
      else r.fail("communication_data_type", "must be \"fp32\", \"fp16\" or \"bf16\"");
    }
    if (r.has(cfg, "optimizer")) {
      const element o = r.at(cfg, "optimizer");
      r.keys(o, "optimizer", {"type", "params"}, {}, "");
      std::string type = r.has(o, "type") ? r.string(o, "optimizer", "type") : "AdamW";
      if (type != "Adam" && type != "AdamW" && type != "adam" && type != "adamw")
        r.fail("optimizer.type", "'" + type + "': zerolm trains with AdamW (decoupled weight decay, like Megatron's Adam)");
      if (r.has(o, "params")) {
        const element p = r.at(o, "params");
        r.keys(p, "optimizer.params", {"lr", "betas", "eps", "weight_decay"}, {"torch_adam", "adam_w_mode", "bias_correction"},
               "zerolm's AdamW is the fused LibTorch kernel with bias correction");
        if (r.has(p, "lr")) a.lr = r.number(p, "optimizer.params", "lr");
        if (r.has(p, "eps")) a.adam_eps = r.number(p, "optimizer.params", "eps");
        if (r.has(p, "weight_decay")) a.weight_decay = r.number(p, "optimizer.params", "weight_decay");
        if (r.has(p, "betas")) {
          simdjson::dom::array betas;
          double b1, b2;
          if (r.at(p, "betas").get_array().get(betas) || betas.size() != 2 || !betas.at(0).is_number() || !betas.at(1).is_number() ||
              betas.at(0).get_double().get(b1) || betas.at(1).get_double().get(b2))
            r.fail("optimizer.params.betas", "must be [beta1, beta2]");
          a.adam_beta1 = b1;
          a.adam_beta2 = b2;
        }
      }
    }
  }
  if (a.offload_params && a.zero_stage != 3) throw Error(ErrorKind::Usage, "%s: offload_param needs zero_optimization.stage 3", path.c_str());
  return out;
}

#else

bool deepspeed_config_supported() { return false; }

DeepSpeedSettings apply_deepspeed_config(TrainArgs&, const std::string& path, int) {
  throw Error(ErrorKind::Usage, "%s: this build reads no DeepSpeed JSON (built without simdjson, libsimdjson-dev); use --zero-stage and --cpu-offload",
              path.c_str());
}

#endif

}  // namespace zlm::trainer
