// convert_gpt --load CKPT --export-hf DIR --vocab-file V [--dump-logits FILE --tokens "1 2 3"]
// convert_gpt --import-hf DIR --save CKPT                         (then pretrain_gpt --load CKPT)
// convert_gpt --import-hf DIR --dump-logits FILE --tokens "..."   (check an imported model)
// Exports the latest checkpoint of a pretrain_gpt run to Hugging Face's GPT2LMHeadModel
// layout, or reads one (GPT-2's released weights, say) into a checkpoint that
// pretrain_gpt continues training from; --dump-logits writes the logits (T x V,
// one row a line) of the given token ids, for comparing with another implementation.
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
#include "trainer/checkpoint/hf_export.h"
#include "trainer/run/torch_errors.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/megatron_format.h"
#include "trainer/checkpoint/deepspeed_format.h"

namespace {

// --tokens: every word an id of the vocabulary, at most the model's positions (nothing cut off silently).
std::vector<int64_t> parse_token_ids(const std::string& tokens, int64_t vocab, int64_t positions) {
  std::vector<int64_t> ids;
  std::istringstream in(tokens);
  std::string word;
  while (in >> word) {
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
  return ids;
}

// The logits (T, Vp) of the ids, one row per position, to `path`. Returns the rows.
uint64_t dump_logits(zlm::trainer::Gpt2& model, const std::vector<int64_t>& ids, const std::string& path) {
  torch::NoGradGuard no_grad;
  auto logits = model->forward(torch::tensor(ids).unsqueeze(0))[0].contiguous();  // (T, Vp)
  zlm::OutputFile out(path);  // temporary name, renamed when complete; a failed write is an error
  auto acc = logits.accessor<float, 2>();
  std::ostringstream row;
  for (int64_t t = 0; t < logits.size(0); ++t) {
    row.str("");
    for (int64_t k = 0; k < logits.size(1); ++k) row << (k ? " " : "") << acc[t][k];
    row << "\n";
    out.write(row.str());
  }
  out.commit();
  return static_cast<uint64_t>(logits.size(0));
}

// The flags.
struct Options {
  std::string load, export_dir, import_dir, save, vocab_file, merge_file, dump, tokens, export_megatron, export_deepspeed;
  int64_t divisible_by = 128, ds_dp = 1;
  int ds_stage = 1;
};

// Exactly one source, at least one action, and flags only where their action is.
void check_actions(const Options& o, const CLI::App& app) {
  if (o.load.empty() == o.import_dir.empty()) throw zlm::Error(zlm::ErrorKind::Usage, "give exactly one of --load and --import-hf");
  if (!o.save.empty() && o.import_dir.empty() && !zlm::trainer::is_megatron_checkpoint(o.load) && !zlm::trainer::is_deepspeed_checkpoint(o.load))
    throw zlm::Error(zlm::ErrorKind::Usage, "--save writes an imported model: it needs --import-hf or a Megatron-LM or DeepSpeed checkpoint "
                     "(a --load checkpoint of ours is one already)");
  if (o.export_dir.empty() && o.dump.empty() && o.save.empty() && o.export_megatron.empty() && o.export_deepspeed.empty())
    throw zlm::Error(zlm::ErrorKind::Usage, "nothing to do: give --export-hf, --export-megatron, --export-deepspeed, --dump-logits%s",
                     o.import_dir.empty() ? "" : " or --save");
  if (o.export_deepspeed.empty() && (app.count("--zero-stage") || app.count("--data-parallel-size")))
    throw zlm::Error(zlm::ErrorKind::Usage, "--zero-stage and --data-parallel-size say how --export-deepspeed partitions the model: give it too");
}

// --export-hf: the vocabulary's size is the model's unpadded one, checked against the checkpoint's record.
void export_to_hf(const Options& o, zlm::trainer::Gpt2& model, const std::string& source, int64_t iteration, zlm::Stats& stats) {
  const zlm::Gpt2Files files = zlm::resolve_gpt2_files(o.vocab_file, o.merge_file);
  if (files.bundled) ZLM_LOG_INF("no --vocab-file/--merge-file given: GPT-2's own, %s", files.vocab_file.c_str());
  auto bpe = zlm::Gpt2Bpe::load(files.vocab_file, files.merge_file);
  stats.set("vocab_file", files.vocab_file);
  const int64_t entries = model->config().vocab_entries;  // 0: a checkpoint that did not record it
  if (entries > 0 && entries != static_cast<int64_t>(bpe.vocab_size()))
    throw zlm::Error(zlm::ErrorKind::Usage, "%s has %zu tokens, the model in %s was trained with %ld ---> HINT: give the --vocab-file it "
                     "was trained with", files.vocab_file.c_str(), bpe.vocab_size(), source.c_str(), (long)entries);
  zlm::trainer::export_hf(model, static_cast<int64_t>(bpe.vocab_size()), o.export_dir);
  ZLM_LOG_INF("exported %s (iteration %ld) to %s", source.c_str(), (long)iteration, o.export_dir.c_str());
}

int convert(const Options& o, zlm::Stats& stats) {
  const std::string source = o.load.empty() ? o.import_dir : o.load;
  int64_t iteration = 0;
  auto model = !o.load.empty() ? zlm::trainer::load_model(o.load, &iteration) : zlm::trainer::import_hf(o.import_dir, o.divisible_by);
  if (!o.export_dir.empty()) export_to_hf(o, model, source, iteration, stats);
  if (!o.save.empty()) {
    zlm::trainer::save_model_checkpoint(o.save, model);
    ZLM_LOG_INF("saved %s as iteration 0 of %s (Adam starts afresh): pretrain_gpt --load %s continues from it", source.c_str(),
                o.save.c_str(), o.save.c_str());
  }
  if (!o.export_megatron.empty()) {
    zlm::trainer::save_megatron_checkpoint(o.export_megatron, model, iteration);
    ZLM_LOG_INF("exported %s (iteration %ld) as Megatron-LM's checkpoint in %s", source.c_str(), (long)iteration, o.export_megatron.c_str());
  }
  if (!o.export_deepspeed.empty()) {
    zlm::trainer::save_deepspeed_checkpoint(o.export_deepspeed, model, iteration, static_cast<zlm::trainer::ZeroStage>(o.ds_stage), o.ds_dp);
    ZLM_LOG_INF("exported %s (iteration %ld) as DeepSpeed's checkpoint (ZeRO %d, %ld data-parallel ranks) in %s", source.c_str(),
                (long)iteration, o.ds_stage, (long)o.ds_dp, o.export_deepspeed.c_str());
  }
  if (!o.dump.empty())
    stats.set("logit_rows", dump_logits(model, parse_token_ids(o.tokens, model->config().vocab_size, model->config().max_positions), o.dump));
  stats.set("iteration", iteration);
  stats.set("parameters", static_cast<uint64_t>(model->num_parameters()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  zlm::CommonFlags common;
  CLI::App app{"Convert pretrain_gpt checkpoints to and from Hugging Face's GPT2LMHeadModel (safetensors); read Megatron-LM's."};
  app.add_option("--load", o.load, "pretrain_gpt checkpoint directory, or Megatron-LM's (--ckpt-format torch)");
  app.add_option("--export-hf", o.export_dir, "Write config.json + model.safetensors here");
  app.add_option("--import-hf", o.import_dir, "Read a GPT2LMHeadModel directory (float32 safetensors)");
  app.add_option("--save", o.save, "With --import-hf, or --load of a Megatron-LM checkpoint: write the model as iteration 0 of a new pretrain_gpt "
                 "checkpoint directory");
  app.add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json, the unpadded vocabulary size (default: GPT-2's own)");
  app.add_option("--merge-file", o.merge_file, "GPT-2 merges.txt (default: GPT-2's own)");
  app.add_option("--make-vocab-size-divisible-by", o.divisible_by, "Padding for --import-hf")->capture_default_str();
  app.add_option("--export-megatron", o.export_megatron, "Write the model as Megatron-LM's checkpoint (--ckpt-format torch, TP 1, PP 1) in this new directory");
  app.add_option("--export-deepspeed", o.export_deepspeed, "Write the model as DeepSpeed's checkpoint in this new directory (ZeRO 1-3: what "
                 "zero_to_fp32.py reads)");
  app.add_option("--zero-stage", o.ds_stage, "With --export-deepspeed: the ZeRO stage whose partitions it writes (0: none, "
                 "the weights in the model file)")->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--data-parallel-size", o.ds_dp, "With --export-deepspeed: the data-parallel ranks it is partitioned for")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))->capture_default_str();
  app.add_option("--dump-logits", o.dump, "Write the logits of --tokens to FILE");
  app.add_option("--tokens", o.tokens, "Space-separated token ids for --dump-logits");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("convert_gpt", app, common, argc, argv, [&] { return zlm::trainer::with_torch_errors([&] { return zlm::run_with_stats("convert_gpt", common, [&](zlm::Stats& stats) {
    check_actions(o, app);
    zlm::check_distinct_paths({{"--dump-logits", o.dump}, {"--stats-out", common.stats_out}},
                              {{"--vocab-file", o.vocab_file}, {"--merge-file", o.merge_file}});
    return convert(o, stats);
  }); }); });
}
