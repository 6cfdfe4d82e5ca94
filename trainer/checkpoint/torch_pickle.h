// Files written by Python's torch.save (the zip format of PyTorch 1.6 and
// later: ARCHIVE/data.pkl, a pickle of protocol 2, and one record
// ARCHIVE/data/KEY per tensor storage), read without Python and without
// running pickled code: the pickle is interpreted into a tree of plain values
// (PyValue), and a pickled call becomes data only for the few constructors a
// checkpoint uses (OrderedDict, torch's tensor rebuilders, torch.Size,
// _codecs.encode). Other classes that Megatron-LM and DeepSpeed checkpoints
// hold (argparse.Namespace for Megatron's `args`, numpy arrays in its RNG
// state, torch dtypes, Megatron's and DeepSpeed's enums and config objects)
// become inert Object values: their class name, constructor arguments and
// state, never instantiated. Any other global (os.system, builtins.eval, ...)
// is refused by name.
//
//   PyValue v = load_torch_file("iter_0000100/mp_rank_00/model_optim_rng.pt");
//   int64_t it = v.at("iteration").as_int();
//   torch::Tensor w = v.at("model").at("embedding.word_embeddings.weight").as_tensor();
//
// Errors: zlm::Error(Format) naming the file and what is wrong (not a zip,
// a truncated record, an unknown opcode, a refused global and where).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zlm::trainer {

struct PyValue {
  enum class Kind { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Tensor, Global, Object };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str, Bytes; Global and Object: the class, "module.name"
  std::vector<std::shared_ptr<PyValue>> items;                                       // List, Tuple; Object: its arguments
  std::vector<std::pair<std::shared_ptr<PyValue>, std::shared_ptr<PyValue>>> entries;  // Dict, in insertion order
  std::shared_ptr<PyValue> state;                                                    // Object: what BUILD gave it
  torch::Tensor tensor;

  bool is(Kind k) const { return kind == k; }
  // A Dict's value for a string key, or an Object's attribute (its state's
  // entry, as argparse.Namespace keeps its fields); nullptr when absent.
  const PyValue* find(std::string_view key) const;
  // A Dict's value for an int key (torch's optimizer state is keyed by parameter index), or nullptr.
  const PyValue* find_int(int64_t key) const;
  // The same, throwing zlm::Error(Format) naming the key when absent.
  const PyValue& at(std::string_view key) const;
  int64_t as_int() const;  // Int or Bool
  double as_float() const;  // Float or Int
  const std::string& as_str() const;
  const torch::Tensor& as_tensor() const;
  // A short description for messages: "dict of 12", "tensor float32 [3, 4]", "argparse.Namespace".
  std::string describe() const;
};

// Reads a torch.save file (messages name the path). kShapesOnly reads the pickle
// alone: its tensors are meta tensors (shape and dtype, no storage read), for a
// look at what a file holds.
enum class TensorData { kRead, kShapesOnly };
PyValue load_torch_file(const std::string& path, TensorData data = TensorData::kRead);

// Writes `v` as torch.save does (a zip of data.pkl, protocol 2, and one storage
// record per tensor), to a temporary name renamed when complete. Takes None,
// Bool, Int, Float, Str, Tuple, List, Dict (str keys; written as an
// OrderedDict), Tensor, Global (written as the global it names: a torch dtype)
// and Object: with a state, an instance whose __dict__ is that state
// (argparse.Namespace, DeepSpeed's LossScaler); without, a call of the class
// on its arguments (torch.Size). Python reads it with torch.load.
void save_torch_file(const std::string& path, const PyValue& v);

// Value builders for save_torch_file.
std::shared_ptr<PyValue> py_int(int64_t i);
std::shared_ptr<PyValue> py_float(double f);
std::shared_ptr<PyValue> py_bool(bool b);
std::shared_ptr<PyValue> py_str(std::string s);
std::shared_ptr<PyValue> py_none();
std::shared_ptr<PyValue> py_tensor(torch::Tensor t);
std::shared_ptr<PyValue> py_global(std::string name);  // "torch.float32"
std::shared_ptr<PyValue> py_dict();                    // then ->entries.emplace_back(py_str(key), value)
std::shared_ptr<PyValue> py_list();                    // then ->items.push_back(value)
std::shared_ptr<PyValue> py_size(const std::vector<int64_t>& dims);  // torch.Size(dims)
std::shared_ptr<PyValue> py_namespace(std::shared_ptr<PyValue> fields);  // argparse.Namespace(**fields)
// An instance of `cls` ("module.Class") with these attributes (a Dict), as pickle
// rebuilds a plain class: created without __init__, then its __dict__ updated.
std::shared_ptr<PyValue> py_object(std::string cls, std::shared_ptr<PyValue> fields);
std::shared_ptr<PyValue> py_tuple(std::vector<std::shared_ptr<PyValue>> items);

// Interprets one pickle; `storage(key, dtype, numel)` supplies the tensor
// storages its persistent ids name (torch.save's), and `where` names the
// pickle in messages. (load_torch_file's engine; tests use it on raw pickles.)
PyValue unpickle(std::string_view bytes, const std::function<torch::Tensor(const std::string&, torch::ScalarType, int64_t)>& storage,
                 const std::string& where);

}  // namespace zlm::trainer
