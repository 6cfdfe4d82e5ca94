// generate_gpt --load DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
// Samples a continuation from the latest checkpoint of a pretrain_gpt run.
#include <torch/torch.h>

#include <cstdio>

#include "common/io/cli.h"
#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"
#include "common/tokenizer/gpt2_files.h"
#include "common/core/log.h"
#include "trainer/run/torch_errors.h"
#include "trainer/checkpoint/checkpoint.h"

namespace {

struct GenerateOptions {
  std::string load, prompt, vocab_file, merge_file;
  int64_t max_new_tokens = 64, top_k = 0;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 1234;
};

// Next token from the last position's logits (Vp): greedy at temperature 0,
// else temperature, top-k and nucleus (top-p) filtering and a draw.
int64_t pick(torch::Tensor logits, const GenerateOptions& o, int64_t vocab, torch::Generator& gen) {
  logits = logits.narrow(0, 0, vocab).to(torch::kFloat);  // never the padding ids
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < vocab) {
    auto kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -INFINITY);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/true);
    auto cum = sorted.softmax(0).cumsum(0);
    auto drop = (cum - sorted.softmax(0)) > o.top_p;  // keep the smallest prefix reaching top_p
    logits = logits.index_put({order.masked_select(drop)}, torch::tensor(-INFINITY));
  }
  return torch::multinomial(logits.softmax(0), 1, false, gen).item<int64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  GenerateOptions o;
  zlm::CommonFlags common;
  CLI::App app{"Sample text from the latest checkpoint of a pretrain_gpt run."};
  app.add_option("--load", o.load, "Checkpoint directory (pretrain_gpt --save)")->required();
  app.add_option("--prompt", o.prompt, "Text to continue")->required();
  app.add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json used for training (default: GPT-2's own, installed with the tools)");
  app.add_option("--merge-file", o.merge_file, "GPT-2 merges.txt used for training (default: GPT-2's own)");
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate")->capture_default_str()->check(zlm::whole_number(1, 1000000));
  app.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str()->check(zlm::finite_range(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "Keep the K most likely tokens (0: all)")->capture_default_str()->check(zlm::whole_number(0, INT32_MAX));
  app.add_option("--top-p", o.top_p, "Nucleus sampling mass")->capture_default_str()->check(zlm::finite_range(0.0, 1.0));
  app.add_option("--seed", o.seed, "Sampling seed")->capture_default_str()->check(zlm::whole_number(0, UINT64_MAX));
  zlm::add_common_flags(app, common);
  return zlm::tool_main("generate_gpt", app, common, argc, argv, [&] { return zlm::trainer::with_torch_errors([&] { return zlm::run_with_stats("generate_gpt", common, [&](zlm::Stats& stats) {
    const zlm::Gpt2Files files = zlm::resolve_gpt2_files(o.vocab_file, o.merge_file);
    if (files.bundled) ZLM_LOG_INF("no --vocab-file/--merge-file given: GPT-2's own, %s", files.vocab_file.c_str());
    o.vocab_file = files.vocab_file;
    auto bpe = zlm::Gpt2Bpe::load(files.vocab_file, files.merge_file);
    int64_t iteration = 0;
    auto model = zlm::trainer::load_model(o.load, &iteration);
    ZLM_LOG_INF("loaded %s at iteration %ld", o.load.c_str(), (long)iteration);
    if (const int64_t entries = model->config().vocab_entries; entries > 0 && entries != static_cast<int64_t>(bpe.vocab_size()))
      throw zlm::Error(zlm::ErrorKind::Usage, "%s has %zu tokens, the model in %s was trained with %ld ---> HINT: give the vocabulary it "
                       "was trained with", o.vocab_file.c_str(), bpe.vocab_size(), o.load.c_str(), (long)entries);
    if (static_cast<int64_t>(bpe.vocab_size()) > model->config().vocab_size)
      throw zlm::Error(zlm::ErrorKind::Usage, "%s has %zu tokens, the model in %s only %ld ---> HINT: give the vocabulary it was trained with",
                       o.vocab_file.c_str(), bpe.vocab_size(), o.load.c_str(), (long)model->config().vocab_size);
    std::vector<int32_t> ids;
    bpe.encode(o.prompt, ids);
    if (ids.empty()) throw zlm::Error(zlm::ErrorKind::Usage, "--prompt encodes to no tokens");
    auto gen = torch::make_generator<at::CPUGeneratorImpl>(o.seed);
    torch::NoGradGuard no_grad;
    const int64_t max_pos = model->config().max_positions, vocab = static_cast<int64_t>(bpe.vocab_size());
    std::vector<int32_t> out;
    for (int64_t n = 0; n < o.max_new_tokens; ++n) {
      int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - max_pos);
      auto idx = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end())).unsqueeze(0);
      auto logits = model->forward(idx)[0][-1];
      int64_t next = pick(logits, o, vocab, gen);
      if (next == bpe.eod_id()) break;
      ids.push_back(static_cast<int32_t>(next));
      out.push_back(static_cast<int32_t>(next));
    }
    std::printf("%s%s\n", o.prompt.c_str(), bpe.decode(out).c_str());
    std::fflush(stdout);
    stats.set("iteration", iteration);
    stats.set("vocab_file", files.vocab_file);
    stats.set("merge_file", files.merge_file);
    stats.set("prompt_tokens", static_cast<uint64_t>(ids.size() - out.size()));
    stats.set("generated_tokens", static_cast<uint64_t>(out.size()));
    return 0;
  }); }); });
}
