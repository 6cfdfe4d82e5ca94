#include "trainer/checkpoint/hf_export.h"

#include <cstring>
#include <filesystem>
#include <map>

#include <simdjson.h>

#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "common/tokenizer/vocab_file.h"
#include "trainer/config/hf_config.h"

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

// config.json of a GPT2LMHeadModel of this shape (dropouts 0: an export is for inference).
std::string hf_config_json(const Gpt2Config& cfg, int64_t vocab) {
  return JsonObject()
             .add_raw("architectures", "[\"GPT2LMHeadModel\"]")
             .add("model_type", "gpt2")
             .add("vocab_size", vocab)
             .add("n_positions", cfg.max_positions)
             .add("n_ctx", cfg.max_positions)
             .add("n_embd", cfg.hidden)
             .add("n_layer", cfg.num_layers)
             .add("n_head", cfg.heads)
             .add_null("n_inner")
             .add("activation_function", cfg.erf_gelu ? "gelu" : "gelu_new")
             .add("layer_norm_epsilon", 1e-5)
             .add("initializer_range", cfg.init_std)
             .add("resid_pdrop", 0.0)
             .add("embd_pdrop", 0.0)
             .add("attn_pdrop", 0.0)
             .add("tie_word_embeddings", true)
             .add("bos_token_id", vocab - 1)
             .add("eos_token_id", vocab - 1)
             .add("torch_dtype", "float32")
             .str() +
         "\n";
}

struct NamedTensor {
  std::string name;
  torch::Tensor t;  // float32, contiguous, CPU, in HF's orientation
};

// safetensors: the header's length (u64 little-endian), the JSON header
// {name: {dtype, shape, data_offsets}}, padded to 8 bytes as safetensors
// writers do, then the tensors' bytes. Written to `out`, not yet published.
void write_safetensors(OutputFile& out, const std::vector<NamedTensor>& tensors) {
  JsonObject index;
  index.add_raw("__metadata__", JsonObject().add("format", "pt").str());
  uint64_t offset = 0;
  for (const auto& e : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(e.t.numel()) * 4;
    index.add_raw(e.name, JsonObject()
                              .add("dtype", "F32")
                              .add_raw("shape", json_array(e.t.sizes().vec()))
                              .add_raw("data_offsets", json_array(std::vector<uint64_t>{offset, offset + bytes}))
                              .str());
    offset += bytes;
  }
  std::string header = index.str();
  while (header.size() % 8) header += ' ';
  const uint64_t n = header.size();
  out.write(&n, 8);
  out.write(header);
  for (const auto& e : tensors) out.write(e.t.data_ptr<float>(), static_cast<size_t>(e.t.numel()) * 4);
  out.finish();
}

// A safetensors file read whole: the float32 tensors' byte ranges by name.
struct SafetensorsFile {
  std::string path, data;
  const char* base = nullptr;  // the data after the header
  uint64_t data_bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> where;  // name -> [begin, end) in the data
};

SafetensorsFile read_safetensors(const std::string& path, std::string data) {
  SafetensorsFile f{path, std::move(data)};
  uint64_t n;
  std::memcpy(&n, f.data.data(), 8);
  if (n > f.data.size() - 8) throw Error(ErrorKind::Format, "%s: header length %lu beyond the file", path.c_str(), (unsigned long)n);
  const std::string header = f.data.substr(8, n);
  f.base = f.data.data() + 8 + n;
  f.data_bytes = f.data.size() - 8 - n;
  simdjson::dom::parser parser;
  simdjson::dom::object entries;
  if (auto err = parser.parse(header).get(entries))
    throw Error(ErrorKind::Format, "%s: the header (bytes 8 to %lu) is not a JSON object: %s", path.c_str(), (unsigned long)(8 + n),
                simdjson::error_message(err));
  for (auto [key, value] : entries) {
    if (key == "__metadata__") continue;
    const std::string name(key);
    std::string_view dtype;
    simdjson::dom::array offsets;
    uint64_t begin, end;
    if (value["dtype"].get_string().get(dtype) || value["data_offsets"].get_array().get(offsets) || offsets.size() != 2 ||
        offsets.at(0).get_uint64().get(begin) || offsets.at(1).get_uint64().get(end))
      throw Error(ErrorKind::Format, "%s: tensor %s: no \"dtype\" string and two \"data_offsets\"", path.c_str(), name.c_str());
    if (dtype != "F32")
      throw Error(ErrorKind::Format, "%s: tensor %s is %.*s; only F32 is supported", path.c_str(), name.c_str(), (int)dtype.size(), dtype.data());
    f.where[name] = {begin, end};
  }
  return f;
}

// Tensor `name` of the file into `target` (its shape says the bytes it needs).
void copy_tensor(const SafetensorsFile& f, const std::string& name, torch::Tensor target) {
  auto it = f.where.find(name);
  if (it == f.where.end()) throw Error(ErrorKind::Format, "%s: missing tensor %s", f.path.c_str(), name.c_str());
  const auto [b, e] = it->second;
  if (b > e || e - b != static_cast<uint64_t>(target.numel()) * 4)
    throw Error(ErrorKind::Format, "%s: tensor %s has %lu bytes, config.json's shape needs %ld", f.path.c_str(), name.c_str(),
                (unsigned long)(e - b), (long)(target.numel() * 4));
  if (e > f.data_bytes)
    throw Error(ErrorKind::Format, "%s: tensor %s ends at byte %lu of the data, which has only %lu (the file is truncated)", f.path.c_str(),
                name.c_str(), (unsigned long)e, (unsigned long)f.data_bytes);
  torch::NoGradGuard no_grad;
  target.copy_(torch::from_blob(const_cast<char*>(f.base + b), target.sizes(), torch::kFloat));
}

// config.json as pretrain_gpt --model-config reads it; here a bad file is damaged input.
HfGpt2Config read_import_config(const std::string& path) {
  try {
    return read_hf_gpt2_config(path);
  } catch (const Error& e) {
    throw Error(e.kind() == ErrorKind::Io ? ErrorKind::Io : ErrorKind::Format, "%s", e.what());
  }
}

}  // namespace

void export_hf(Gpt2& model, int64_t vocab, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<NamedTensor> tensors;
  {
    torch::NoGradGuard no_grad;
    for (const Mapped& m : hf_layout(model, vocab)) {
      torch::Tensor t = m.transposed ? m.ours.t() : m.ours;
      tensors.push_back({m.name, t.detach().to(torch::kCPU, torch::kFloat).contiguous()});
    }
  }
  OutputFile weights((std::filesystem::path(dir) / "model.safetensors").string());
  write_safetensors(weights, tensors);
  // Both files complete on disk before either appears; config.json last, so a
  // directory with a config.json always has its weights.
  OutputFile config((std::filesystem::path(dir) / "config.json").string());
  config.write(hf_config_json(model->config(), vocab));
  config.finish();
  weights.publish();
  config.publish();
}

Gpt2 import_hf(const std::string& dir, int64_t divisible_by) {
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  const std::string st_path = (std::filesystem::path(dir) / "model.safetensors").string();
  const HfGpt2Config hf = read_import_config(cfg_path);
  if (divisible_by < 1) throw Error(ErrorKind::Usage, "--make-vocab-size-divisible-by must be at least 1");
  std::string data = read_file(st_path);
  if (data.size() < 8) throw Error(ErrorKind::Format, "%s: %zu bytes: truncated (no header length)", st_path.c_str(), data.size());
  {  // the weights that config.json describes must fit in the file before anything is allocated
    const uint64_t h = static_cast<uint64_t>(hf.n_embd);
    const uint64_t params = (static_cast<uint64_t>(hf.vocab_size) + static_cast<uint64_t>(hf.n_positions)) * h +
                            static_cast<uint64_t>(hf.n_layer) * (12 * h * h + 13 * h) + 2 * h;
    if (params * 4 > data.size())
      throw Error(ErrorKind::Format, "%s: %zu bytes, but %s describes %lu float32 parameters (%lu bytes) ---> HINT: the file is truncated "
                  "or belongs to another model", st_path.c_str(), data.size(), cfg_path.c_str(), (unsigned long)params, (unsigned long)(params * 4));
  }
  const auto padded = static_cast<int64_t>(padded_vocab_size(static_cast<uint64_t>(hf.vocab_size), static_cast<uint64_t>(divisible_by)));
  const Gpt2Config c{.vocab_size = padded, .vocab_entries = hf.vocab_size, .max_positions = hf.n_positions, .num_layers = hf.n_layer,
                     .hidden = hf.n_embd, .heads = hf.n_head, .hidden_dropout = 0, .attention_dropout = 0, .erf_gelu = hf.erf_gelu};
  Gpt2 model(c, ModelPart{}, ParamInit::Empty);  // every parameter is read below (the padding rows zeroed)
  const SafetensorsFile file = read_safetensors(st_path, std::move(data));
  torch::NoGradGuard no_grad;
  model->wte->weight.zero_();  // the padding rows
  for (const Mapped& m : hf_layout(model, hf.vocab_size)) copy_tensor(file, m.name, m.transposed ? m.ours.t() : m.ours);
  model->eval();
  return model;
}

}  // namespace zlm::trainer
