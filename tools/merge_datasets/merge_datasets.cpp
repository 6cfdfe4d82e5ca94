#include "tools/merge_datasets/merge_datasets.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include "common/core/error.h"
#include "common/core/log.h"
#include "formats/megatron_mmap.h"

namespace zlm::merge_datasets {

namespace fs = std::filesystem;
using formats::MegatronReader;
using formats::MegatronWriter;

static std::vector<std::string> find_prefixes(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorKind::Usage, "--input '%s' is not a directory ---> HINT: pass the directory holding the .bin/.idx pairs", dir.c_str());
  std::set<std::string> prefixes;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const fs::path& p = entry.path();
    std::string ext = p.extension().string();
    std::string prefix = (p.parent_path() / p.stem()).string();
    if (ext != ".bin" && ext != ".idx")
      throw Error(ErrorKind::Usage, "'%s' in --input is neither a .bin nor a .idx file ---> HINT: the input directory must hold only dataset pairs",
                  p.string().c_str());
    std::string sibling = prefix + (ext == ".bin" ? ".idx" : ".bin");
    if (!fs::exists(sibling, ec))
      throw Error(ErrorKind::Usage, "'%s' has no matching '%s'", p.string().c_str(), sibling.c_str());
    prefixes.insert(prefix);
  }
  if (prefixes.empty()) throw Error(ErrorKind::Usage, "--input '%s' holds no .bin/.idx pairs", dir.c_str());
  // std::set orders by bytes, which for UTF-8 equals Python's code-point order.
  return {prefixes.begin(), prefixes.end()};
}

void run(const MergeOptions& options, Stats& stats) {
  fs::path out_dir = fs::path(options.output_prefix).parent_path();
  std::error_code ec;
  if (!out_dir.empty() && !fs::is_directory(out_dir, ec))
    throw Error(ErrorKind::Usage, "the directory of --output-prefix '%s' does not exist", options.output_prefix.c_str());
  std::vector<std::string> prefixes = find_prefixes(options.input_dir);
  std::unique_ptr<MegatronWriter> writer;
  uint64_t tokens = 0;
  for (const auto& prefix : prefixes) {
    if (fs::absolute(prefix) == fs::absolute(options.output_prefix))
      throw Error(ErrorKind::Usage, "--output-prefix '%s' is one of the inputs", options.output_prefix.c_str());
    MegatronReader reader(prefix);
    if (reader.multimodal())
      throw Error(ErrorKind::Format, "%s: multimodal indexes are not supported by merge_datasets yet", prefix.c_str());
    if (!writer) writer = std::make_unique<MegatronWriter>(options.output_prefix, reader.dtype());
    writer->add_index(reader);
    tokens += reader.total_tokens();
    ZLM_LOG_INF("merged %s: %lu documents, %lu sequences", prefix.c_str(), (unsigned long)reader.num_documents(),
                (unsigned long)reader.num_sequences());
  }
  uint64_t docs = writer->num_documents(), seqs = writer->num_sequences(), bytes = writer->bin_bytes();
  writer->finalize();
  stats.set("datasets_in", static_cast<uint64_t>(prefixes.size()));
  stats.set("documents_out", docs);
  stats.set("sequences_out", seqs);
  stats.set("tokens_out", tokens);
  stats.set("bin_bytes_out", bytes);
}

}  // namespace zlm::merge_datasets
