// pretrain_gpt: GPT-2 pretraining with Megatron-LM's pretrain_gpt.py command line.
#include <torch/torch.h>

#include <cstdio>

#include "common/build_info.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/megatron_args.h"
#include "trainer/trainer.h"

int main(int argc, char** argv) {
  zlm::log_init("pretrain_gpt");
  try {
    std::string help;
    auto args = zlm::trainer::parse_megatron_args(argc, argv, &help);
    if (!help.empty()) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
    return zlm::trainer::train(args);
  } catch (const zlm::Error& e) {
    std::fprintf(stderr, "pretrain_gpt: error: %s\n", e.what());
    return e.kind() == zlm::ErrorKind::Usage ? 2 : 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "pretrain_gpt: error (LibTorch): %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pretrain_gpt: error: %s\n", e.what());
    return 1;
  }
}
