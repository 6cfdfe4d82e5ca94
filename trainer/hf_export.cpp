#include "trainer/hf_export.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "common/error.h"
#include "common/output_file.h"

namespace zlm::trainer {

namespace {

// One parameter in Hugging Face's naming: our tensor, and whether HF stores its transpose (Conv1D).
struct Mapped {
  std::string name;
  torch::Tensor ours;
  bool transposed;
};

// The single table of names: export and import both walk it.
std::vector<Mapped> hf_layout(Gpt2& model, int64_t vocab) {
  std::vector<Mapped> out;
  out.push_back({"transformer.wte.weight", model->wte->weight.narrow(0, 0, vocab), false});
  out.push_back({"transformer.wpe.weight", model->wpe->weight, false});
  int i = 0;
  for (const auto& m : *model->blocks) {
    auto* b = m->as<Gpt2BlockImpl>();
    std::string p = "transformer.h." + std::to_string(i++) + ".";
    struct Item { const char* suffix; torch::Tensor t; bool tr; };
    for (const Item& it : {Item{"ln_1.weight", b->ln1->weight, false}, Item{"ln_1.bias", b->ln1->bias, false},
                           Item{"attn.c_attn.weight", b->attn_qkv->weight, true}, Item{"attn.c_attn.bias", b->attn_qkv->bias, false},
                           Item{"attn.c_proj.weight", b->attn_proj->weight, true}, Item{"attn.c_proj.bias", b->attn_proj->bias, false},
                           Item{"ln_2.weight", b->ln2->weight, false}, Item{"ln_2.bias", b->ln2->bias, false},
                           Item{"mlp.c_fc.weight", b->mlp_fc->weight, true}, Item{"mlp.c_fc.bias", b->mlp_fc->bias, false},
                           Item{"mlp.c_proj.weight", b->mlp_proj->weight, true}, Item{"mlp.c_proj.bias", b->mlp_proj->bias, false}})
      out.push_back({p + it.suffix, it.t, it.tr});
  }
  out.push_back({"transformer.ln_f.weight", model->ln_f->weight, false});
  out.push_back({"transformer.ln_f.bias", model->ln_f->bias, false});
  return out;
}

}  // namespace

void export_hf(Gpt2& model, int64_t vocab, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const Gpt2Config& cfg = model->config();
  std::string config = "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": " +
                       std::to_string(vocab) + ",\n  \"n_positions\": " + std::to_string(cfg.max_positions) +
                       ",\n  \"n_ctx\": " + std::to_string(cfg.max_positions) + ",\n  \"n_embd\": " + std::to_string(cfg.hidden) +
                       ",\n  \"n_layer\": " + std::to_string(cfg.num_layers) + ",\n  \"n_head\": " + std::to_string(cfg.heads) +
                       ",\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                       "  \"initializer_range\": " + std::to_string(cfg.init_std) +
                       ",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n  \"tie_word_embeddings\": true,\n"
                       "  \"bos_token_id\": " + std::to_string(vocab - 1) + ",\n  \"eos_token_id\": " + std::to_string(vocab - 1) +
                       ",\n  \"torch_dtype\": \"float32\"\n}\n";
  struct Entry {
    std::string name;
    torch::Tensor t;  // float32, contiguous, CPU, in HF's orientation
  };
  std::vector<Entry> tensors;
  {
    torch::NoGradGuard no_grad;
    for (const Mapped& m : hf_layout(model, vocab)) {
      torch::Tensor t = m.transposed ? m.ours.t() : m.ours;
      tensors.push_back({m.name, t.detach().to(torch::kCPU, torch::kFloat).contiguous()});
    }
  }
  std::string header = "{\"__metadata__\": {\"format\": \"pt\"}";
  uint64_t offset = 0;
  for (const auto& e : tensors) {
    uint64_t bytes = static_cast<uint64_t>(e.t.numel()) * 4;
    header += ", \"" + e.name + "\": {\"dtype\": \"F32\", \"shape\": [";
    for (int64_t d = 0; d < e.t.dim(); ++d) header += (d ? ", " : "") + std::to_string(e.t.size(d));
    header += "], \"data_offsets\": [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8) header += ' ';  // align the data to 8 bytes, as safetensors writers do
  OutputFile out((std::filesystem::path(dir) / "model.safetensors").string());
  uint64_t n = header.size();
  out.write(&n, 8);
  out.write(header);
  for (const auto& e : tensors) out.write(e.t.data_ptr<float>(), static_cast<size_t>(e.t.numel()) * 4);
  // Both files complete on disk before either appears; config.json last, so a
  // directory with a config.json always has its weights.
  out.finish();
  OutputFile config_out((std::filesystem::path(dir) / "config.json").string());
  config_out.write(config);
  config_out.finish();
  out.publish();
  config_out.publish();
}

Gpt2 import_hf(const std::string& dir, int64_t divisible_by) {
  std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  std::string st_path = (std::filesystem::path(dir) / "model.safetensors").string();
  std::string cfg = read_file(cfg_path);
  auto field = [&](const char* key) -> int64_t {
    std::smatch m;
    std::regex re(std::string("\"") + key + "\"\\s*:\\s*(-?[0-9]+)");
    if (!std::regex_search(cfg, m, re)) throw Error(ErrorKind::Format, "%s: no integer field '%s'", cfg_path.c_str(), key);
    return std::strtoll(m[1].str().c_str(), nullptr, 10);  // saturates; the ranges below refuse it
  };
  // Plausible sizes first: the model is allocated from them.
  auto in_range = [&](const char* key, int64_t lo, int64_t hi) {
    const int64_t v = field(key);
    if (v < lo || v > hi) throw Error(ErrorKind::Format, "%s: \"%s\": %ld is outside [%ld, %ld]", cfg_path.c_str(), key, (long)v, (long)lo, (long)hi);
    return v;
  };
  const int64_t vocab = in_range("vocab_size", 1, int64_t{1} << 24), positions = in_range("n_positions", 1, int64_t{1} << 20);
  const int64_t layers = in_range("n_layer", 1, 1024), hidden = in_range("n_embd", 1, 65536), heads = in_range("n_head", 1, 1024);
  if (hidden % heads != 0) throw Error(ErrorKind::Format, "%s: n_embd %ld is not divisible by n_head %ld", cfg_path.c_str(), (long)hidden, (long)heads);
  if (divisible_by < 1) throw Error(ErrorKind::Usage, "--make-vocab-size-divisible-by must be at least 1");
  std::string data = read_file(st_path);
  if (data.size() < 8) throw Error(ErrorKind::Format, "%s: %zu bytes: truncated (no header length)", st_path.c_str(), data.size());
  {  // the weights that config.json describes must fit in the file before anything is allocated
    const uint64_t h = static_cast<uint64_t>(hidden), params = static_cast<uint64_t>(vocab) * h + static_cast<uint64_t>(positions) * h +
                                                               static_cast<uint64_t>(layers) * (12 * h * h + 13 * h) + 2 * h;
    if (params * 4 > data.size())
      throw Error(ErrorKind::Format, "%s: %zu bytes, but %s describes %lu float32 parameters (%lu bytes) ---> HINT: the file is truncated "
                  "or belongs to another model", st_path.c_str(), data.size(), cfg_path.c_str(), (unsigned long)params, (unsigned long)(params * 4));
  }
  const int64_t padded = (vocab + divisible_by - 1) / divisible_by * divisible_by;
  Gpt2Config c{.vocab_size = padded, .max_positions = positions, .num_layers = layers,
               .hidden = hidden, .heads = heads, .hidden_dropout = 0, .attention_dropout = 0};
  Gpt2 model(c);
  uint64_t n;
  std::memcpy(&n, data.data(), 8);
  if (n > data.size() - 8) throw Error(ErrorKind::Format, "%s: header length %lu beyond the file", st_path.c_str(), (unsigned long)n);
  std::string header = data.substr(8, n);
  const char* base = data.data() + 8 + n;
  const uint64_t data_bytes = data.size() - 8 - n;
  // name -> (begin, end) from the header; float32 only.
  std::map<std::string, std::pair<uint64_t, uint64_t>> where;
  std::regex entry("\"([^\"]+)\"\\s*:\\s*\\{\\s*\"dtype\"\\s*:\\s*\"([A-Z0-9]+)\"[^}]*\"data_offsets\"\\s*:\\s*\\[\\s*([0-9]+)\\s*,\\s*([0-9]+)\\s*\\]");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), entry); it != std::sregex_iterator(); ++it) {
    if ((*it)[2] != "F32") throw Error(ErrorKind::Format, "%s: tensor %s is %s; only F32 is supported", st_path.c_str(),
                                       (*it)[1].str().c_str(), (*it)[2].str().c_str());
    where[(*it)[1]] = {std::stoull((*it)[3]), std::stoull((*it)[4])};
  }
  auto copy = [&](const std::string& name, torch::Tensor dst, bool transpose) {
    auto it = where.find(name);
    if (it == where.end()) throw Error(ErrorKind::Format, "%s: missing tensor %s", st_path.c_str(), name.c_str());
    auto [b, e] = it->second;
    torch::Tensor target = transpose ? dst.t() : dst;
    if (b > e || e - b != static_cast<uint64_t>(target.numel()) * 4)
      throw Error(ErrorKind::Format, "%s: tensor %s has %lu bytes, config.json's shape needs %ld", st_path.c_str(), name.c_str(),
                  (unsigned long)(e - b), (long)(target.numel() * 4));
    if (e > data_bytes)
      throw Error(ErrorKind::Format, "%s: tensor %s ends at byte %lu of the data, which has only %lu (the file is truncated)", st_path.c_str(),
                  name.c_str(), (unsigned long)e, (unsigned long)data_bytes);
    auto src = torch::from_blob(const_cast<char*>(base + b), target.sizes(), torch::kFloat);
    torch::NoGradGuard no_grad;
    target.copy_(src);
  };
  torch::NoGradGuard no_grad;
  model->wte->weight.zero_();  // the padding rows
  for (const Mapped& m : hf_layout(model, vocab)) copy(m.name, m.ours, m.transposed);
  model->eval();
  return model;
}

}  // namespace zlm::trainer
