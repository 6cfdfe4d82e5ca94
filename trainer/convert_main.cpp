// convert_gpt --load CKPT --export-hf DIR --vocab-file V [--dump-logits FILE --tokens "1 2 3"]
// convert_gpt --import-hf DIR --dump-logits FILE --tokens "..."   (check an imported model)
// Exports the latest checkpoint of a pretrain_gpt run to Hugging Face's GPT2LMHeadModel
// layout, or reads one back; --dump-logits writes the logits (T x V, one row a line) of
// the given token ids, for comparing with another implementation.
#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/io/cli.h"
#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"
#include "common/tokenizer/gpt2_files.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "trainer/hf_export.h"
#include "trainer/torch_errors.h"
#include "trainer/trainer.h"

int main(int argc, char** argv) {
  std::string load, export_dir, import_dir, vocab_file, merge_file, dump, tokens;
  int64_t divisible_by = 128;
  zlm::CommonFlags common;
  CLI::App app{"Convert pretrain_gpt checkpoints to and from Hugging Face's GPT2LMHeadModel (safetensors)."};
  app.add_option("--load", load, "pretrain_gpt checkpoint directory");
  app.add_option("--export-hf", export_dir, "Write config.json + model.safetensors here");
  app.add_option("--import-hf", import_dir, "Read a GPT2LMHeadModel directory (float32 safetensors)");
  app.add_option("--vocab-file", vocab_file, "GPT-2 vocab.json, the unpadded vocabulary size (default: GPT-2's own)");
  app.add_option("--merge-file", merge_file, "GPT-2 merges.txt (default: GPT-2's own)");
  app.add_option("--make-vocab-size-divisible-by", divisible_by, "Padding for --import-hf")->capture_default_str();
  app.add_option("--dump-logits", dump, "Write the logits of --tokens to FILE");
  app.add_option("--tokens", tokens, "Space-separated token ids for --dump-logits");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("convert_gpt", app, common, argc, argv, [&] { return zlm::trainer::with_torch_errors([&] { return zlm::run_with_stats("convert_gpt", common, [&](zlm::Stats& stats) {
    if (load.empty() == import_dir.empty()) throw zlm::Error(zlm::ErrorKind::Usage, "give exactly one of --load and --import-hf");
    zlm::check_distinct_paths({{"--dump-logits", dump}, {"--stats-out", common.stats_out}},
                              {{"--vocab-file", vocab_file}, {"--merge-file", merge_file}});
    int64_t iteration = 0;
    auto model = !load.empty() ? zlm::trainer::load_model(load, &iteration) : zlm::trainer::import_hf(import_dir, divisible_by);
    if (!export_dir.empty()) {
      const zlm::Gpt2Files files = zlm::resolve_gpt2_files(vocab_file, merge_file);  // the unpadded vocabulary
      auto bpe = zlm::Gpt2Bpe::load(files.vocab_file, files.merge_file);
      stats.set("vocab_file", files.vocab_file);
      zlm::trainer::export_hf(model, static_cast<int64_t>(bpe.vocab_size()), export_dir);
      ZLM_LOG_INF("exported %s (iteration %ld) to %s", load.c_str(), (long)iteration, export_dir.c_str());
    }
    if (!dump.empty()) {
      std::vector<int64_t> ids;
      std::istringstream in(tokens);
      std::string word;
      const int64_t vocab = model->config().vocab_size, positions = model->config().max_positions;
      while (in >> word) {  // every word an id of the vocabulary: nothing cut off silently
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(word.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE || v < 0 || v >= vocab)
          throw zlm::Error(zlm::ErrorKind::Usage, "--tokens: '%s' (word %zu) is not a token id in [0, %ld)", word.c_str(), ids.size() + 1, (long)vocab);
        ids.push_back(v);
      }
      if (ids.empty()) throw zlm::Error(zlm::ErrorKind::Usage, "--dump-logits needs --tokens");
      if (static_cast<int64_t>(ids.size()) > positions)
        throw zlm::Error(zlm::ErrorKind::Usage, "--tokens: %zu ids, the model has %ld positions", ids.size(), (long)positions);
      torch::NoGradGuard no_grad;
      auto logits = model->forward(torch::tensor(ids).unsqueeze(0))[0].contiguous();  // (T, Vp)
      zlm::OutputFile out(dump);  // temporary name, renamed when complete; a failed write is an error
      auto acc = logits.accessor<float, 2>();
      std::ostringstream row;
      for (int64_t t = 0; t < logits.size(0); ++t) {
        row.str("");
        for (int64_t k = 0; k < logits.size(1); ++k) row << (k ? " " : "") << acc[t][k];
        row << "\n";
        out.write(row.str());
      }
      out.commit();
      stats.set("logit_rows", static_cast<uint64_t>(logits.size(0)));
    }
    stats.set("iteration", iteration);
    stats.set("parameters", static_cast<uint64_t>(model->num_parameters()));
    return 0;
  }); }); });
}
