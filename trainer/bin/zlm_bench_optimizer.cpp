// zlm_bench_optimizer: seconds per optimizer step of the ZeRO engine (stage 1)
// (the part of a step that DeepSpeed's users of CPU offload see dominate:
// docs/benchmarks.md, "The optimizer step on the CPU"), for a GPT-2 of the given shape. Each iteration runs
// one tiny forward/backward (untimed, so that the gradients come from the
// engine's own hooks), then times reduce_grads() + the norm + step(): the gradient norm,
// clipping and AdamW over this rank's shard, the data-parallel reduce-scatter
// and all-gather when several ranks run, and with --offload the copies of the
// new parameters up (the gradients' copies down start as each bucket's
// reduction is done, inside the untimed backward, as in training; on a CPU
// run they are plain copies there). Rank 0 prints one JSON line.
// Several ranks: started by any launcher (RANK, WORLD_SIZE, MASTER_ADDR, ...: dist_env.h).
// --dump DIR: instead of timing, one step on gradients also computed by plain
// autograd, written for tests/bench/baseline_optimizer.py's check:
// DIR/manifest.json (the gradient norm; name, shape, offset of every parameter) and the float32
// parameters before (p0.bin), gradients (grad.bin) and parameters after the
// step (p1.bin), each concatenated in manifest order.
//   zlm_bench_optimizer --layers 12 --hidden 1024 --iters 5 [--offload] [--device cuda] [--dump DIR]
#include <torch/torch.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/core/output_file.h"
#include "trainer/parallel/comm.h"
#include "trainer/run/device_memory.h"
#include "trainer/config/dist_env.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/zero/engine.h"

namespace {

using namespace zlm::trainer;

// Every parameter's float32 values, concatenated in named_parameters() order.
std::string concat(const std::vector<torch::Tensor>& tensors) {
  std::string out;
  for (const auto& t : tensors) {
    auto c = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * sizeof(float));
  }
  return out;
}

// The --dump check: gradients from plain autograd (before the engine exists, so
// none of its hooks run), then the engine's step on the same micro-batch
// (gradients averaged over identical ranks: the same values), written out.
int dump_one_step(Gpt2& model, Comm& comm, const ZeroConfig& zc, const torch::Device& device, const torch::Tensor& tokens,
                  const std::string& dir, int rank) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> p0, grads;
  model->loss(tokens, tokens).backward();
  for (auto& item : model->named_parameters()) {
    names.push_back(item.key());
    p0.push_back(item.value().detach().clone());
    grads.push_back(item.value().grad().clone());
    item.value().mutable_grad() = torch::Tensor();
  }
  ZeroEngine engine(model, comm, zc, device);
  engine.begin_step(1);
  model->loss(tokens, tokens).backward();
  engine.after_backward();
  engine.reduce_grads(1.0 / comm.world());
  const double norm = std::sqrt(engine.grad_sum_of_squares());
  engine.step(1e-4, norm > 1.0 ? 1.0 / norm : 1.0);
  const auto state = engine.gather_state();  // collective; full tensors on rank 0
  if (rank != 0) return 0;
  std::vector<torch::Tensor> p1;
  std::string manifest = "[";
  int64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    p1.push_back(state.params.at(names[i]));
    manifest += (i ? ", " : "") + zlm::JsonObject()
                                      .add("name", names[i])
                                      .add_raw("shape", zlm::json_array(p0[i].sizes().vec()))
                                      .add("offset", offset)
                                      .str();
    offset += p0[i].numel();
  }
  std::filesystem::create_directories(dir);
  zlm::write_file_atomic(dir + "/manifest.json",
                         zlm::JsonObject().add("grad_norm", norm).add_raw("params", manifest + "]").str() + "\n");
  zlm::write_file_atomic(dir + "/p0.bin", concat(p0));
  zlm::write_file_atomic(dir + "/grad.bin", concat(grads));
  zlm::write_file_atomic(dir + "/p1.bin", concat(p1));
  std::printf("%s\n", zlm::JsonObject().add("dumped", dir).add("params", offset).add("grad_norm", norm).str().c_str());
  return 0;
}

struct Options {
  int64_t layers = 12, hidden = 1024, heads = 16, vocab = 50304, iters = 5;
  bool offload = false;
  std::string device_name = "cpu", dump_dir;
};

int run(const Options& o) {
  torch::manual_seed(1234);
  // An index, as the trainer gives its device (a bare "cuda" would not compare equal to cuda:0).
  const torch::Device device = o.device_name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(o.device_name);
  Gpt2Config cfg{.vocab_size = o.vocab, .max_positions = 8, .num_layers = o.layers, .hidden = o.hidden, .heads = o.heads,
                 .hidden_dropout = 0, .attention_dropout = 0};
  Gpt2 model(cfg);
  model->to(device);
  const DistEnv env = dist_env_from_process();
  auto comm = make_comm(env, "gloo", -1, std::chrono::minutes(1));
  auto tokens = torch::randint(o.vocab, {1, 8}, torch::TensorOptions().dtype(torch::kLong).device(device));
  ZeroConfig zc;
  zc.plan = zero_plan(ZeroStage::kShardedOptimizer, o.offload);
  if (!o.dump_dir.empty()) return dump_one_step(model, *comm, zc, device, tokens, o.dump_dir, env.rank);
  ZeroEngine engine(model, *comm, zc, device);
  double total = 0;
  for (int64_t it = 0; it <= o.iters; ++it) {  // iteration 0 warms up (first-touch of the Adam moments)
    engine.begin_step(1);
    model->loss(tokens, tokens).backward();
    engine.after_backward();
    if (device.is_cuda()) torch::cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    engine.reduce_grads(1.0 / comm->world());  // the mean over ranks, as the trainer's
    const double norm = std::sqrt(engine.grad_sum_of_squares());
    engine.step(1e-4, norm > 1.0 ? 1.0 / norm : 1.0);
    if (device.is_cuda()) torch::cuda::synchronize();
    if (it > 0) total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (env.rank != 0) return 0;
  std::printf("%s\n", zlm::JsonObject()
                          .add("impl", o.offload ? "zerolm (offload)" : "zerolm")
                          .add("ranks", env.world_size)
                          .add("params", model->num_parameters())
                          .add("seconds_per_step", total / static_cast<double>(o.iters))
                          .add("threads", at::get_num_threads())
                          .str()
                          .c_str());
  return 0;
}

// Flags by hand (no CLI11: the binary builds in the trainer-alone configuration,
// as on the GPU machine, which has no CLI11): --name VALUE or --name=VALUE.
constexpr const char* kUsage =
    "usage: zlm_bench_optimizer [--layers N] [--hidden N] [--heads N] [--vocab N] [--iters N] [--offload] [--device cpu|cuda] "
    "[--dump DIR]\n"
    "Seconds per optimizer step of the ZeRO engine (stage 1) for a GPT-2 of the given shape; one JSON line on stdout.\n"
    "  --layers N    transformer layers (12)\n"
    "  --hidden N    hidden size (1024)\n"
    "  --heads N     attention heads (16)\n"
    "  --vocab N     vocabulary rows (50304)\n"
    "  --iters N     timed steps, after one warm-up step (5)\n"
    "  --offload     master weights and Adam moments in CPU memory, AdamW on the CPU\n"
    "  --device D    cpu or cuda (cpu)\n"
    "  --dump DIR    one step on autograd's gradients, written to DIR for baseline_optimizer.py instead of timing\n";

// False for --help.
bool parse_flags(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    const size_t eq = flag.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw zlm::Error(zlm::ErrorKind::Usage, "%s needs a value", flag.c_str());
      return argv[++i];
    };
    auto count = [&](int64_t& out) {
      const std::string v = take();
      int64_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > (int64_t{1} << 40))
        throw zlm::Error(zlm::ErrorKind::Usage, "%s: '%s' is not a whole number from 1 to 2^40", flag.c_str(), v.c_str());
      out = n;
    };
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "--layers") count(o.layers);
    else if (flag == "--hidden") count(o.hidden);
    else if (flag == "--heads") count(o.heads);
    else if (flag == "--vocab") count(o.vocab);
    else if (flag == "--iters") count(o.iters);
    else if (flag == "--offload" && !inline_value) o.offload = true;
    else if (flag == "--dump") o.dump_dir = take();
    else if (flag == "--device") {
      o.device_name = take();
      if (o.device_name != "cpu" && o.device_name != "cuda")
        throw zlm::Error(zlm::ErrorKind::Usage, "--device: '%s' is not cpu or cuda", o.device_name.c_str());
    } else {
      throw zlm::Error(zlm::ErrorKind::Usage, "unknown flag %s (see --help)", argv[i]);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    if (!parse_flags(argc, argv, o)) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    zlm::trainer::enable_huge_pages_for_cpu_tensors();  // as pretrain_gpt does
    return run(o);
  } catch (const zlm::Error& e) {
    std::fprintf(stderr, "zlm_bench_optimizer: %s\n", e.what());
    return zlm::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zlm_bench_optimizer: %s\n", e.what());
    return 1;
  }
}
