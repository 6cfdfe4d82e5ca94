// zlm_bench_optimizer: seconds per optimizer step of the ZeRO engine on one
// rank (the part of a step that DeepSpeed's users of CPU offload see dominate:
// docs/benchmarks.md, "The optimizer step on the CPU"), for a GPT-2 of the given shape. Each iteration runs
// one tiny forward/backward (untimed, so that the gradients come from the
// engine's own hooks), then times reduce_grads() + the norm + step(): the gradient norm,
// clipping and AdamW over every parameter, and with --offload the copies to and
// from the CPU master weights. Prints one JSON line.
//   zlm_bench_optimizer --layers 12 --hidden 1024 --iters 5 [--offload] [--device cuda]
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "trainer/comm.h"
#include "trainer/device_memory.h"
#include "trainer/dist_env.h"
#include "trainer/gpt2_model.h"
#include "trainer/megatron_args.h"
#include "trainer/zero.h"

namespace {

int run(int argc, char** argv) {
  using namespace zlm::trainer;
  int64_t layers = 12, hidden = 1024, heads = 16, vocab = 50304, iters = 5;
  bool offload = false;
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw zlm::Error(zlm::ErrorKind::Usage, "%s needs a value", a.c_str());
      return argv[++i];
    };
    // A whole number in [1, 2^40].
    auto count = [&]() -> int64_t {
      const int64_t x = parse_int_flag(a, next());
      if (x < 1 || x > (int64_t{1} << 40)) throw zlm::Error(zlm::ErrorKind::Usage, "%s: %ld is outside [1, 2^40]", a.c_str(), (long)x);
      return x;
    };
    if (a == "--layers") layers = count();
    else if (a == "--hidden") hidden = count();
    else if (a == "--heads") heads = count();
    else if (a == "--vocab") vocab = count();
    else if (a == "--iters") iters = count();
    else if (a == "--offload") offload = true;
    else if (a == "--device") device_name = next();
    else if (a == "--help") {
      std::puts("zlm_bench_optimizer --layers L --hidden H [--heads N] [--vocab V] [--iters N] [--offload] [--device cpu|cuda]");
      return 0;
    } else {
      throw zlm::Error(zlm::ErrorKind::Usage, "unknown flag %s (see --help)", a.c_str());
    }
  }
  torch::manual_seed(1234);
  // An index, as the trainer gives its device (a bare "cuda" would not compare equal to cuda:0).
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(device_name);
  Gpt2Config cfg{.vocab_size = vocab, .max_positions = 8, .num_layers = layers, .hidden = hidden, .heads = heads,
                 .hidden_dropout = 0, .attention_dropout = 0};
  Gpt2 model(cfg);
  model->to(device);
  auto comm = make_comm(DistEnv{}, "gloo", -1, std::chrono::minutes(1));
  ZeroConfig zc;
  zc.stage = 1;
  zc.offload_optimizer = offload;
  ZeroEngine engine(model, *comm, zc, device);
  auto tokens = torch::randint(vocab, {1, 8}, torch::TensorOptions().dtype(torch::kLong).device(device));
  double total = 0;
  for (int64_t it = 0; it <= iters; ++it) {  // iteration 0 warms up (first-touch of the Adam moments)
    engine.begin_step(1);
    model->loss(tokens, tokens).backward();
    engine.after_backward();
    if (device.is_cuda()) torch::cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    engine.reduce_grads(1.0);
    const double norm = std::sqrt(engine.grad_sum_of_squares());
    engine.step(1e-4, norm > 1.0 ? 1.0 / norm : 1.0);
    if (device.is_cuda()) torch::cuda::synchronize();
    if (it > 0) total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::printf("%s\n", zlm::JsonObject()
                          .add("impl", offload ? "zerolm (offload)" : "zerolm")
                          .add("params", model->num_parameters())
                          .add("seconds_per_step", total / static_cast<double>(iters))
                          .add("threads", at::get_num_threads())
                          .str()
                          .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zlm::trainer::enable_huge_pages_for_cpu_tensors();  // as pretrain_gpt does
  try {
    return run(argc, argv);
  } catch (const zlm::Error& e) {
    std::fprintf(stderr, "zlm_bench_optimizer: error: %s\n", e.what());
    return zlm::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zlm_bench_optimizer: error: %s\n", e.what());
    return 1;
  }
}
