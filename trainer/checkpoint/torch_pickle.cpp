#include "trainer/checkpoint/torch_pickle.h"

#include <caffe2/serialize/inline_container.h>

#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "common/core/error.h"

namespace zlm::trainer {

namespace {

using Py = std::shared_ptr<PyValue>;

const char* kind_name(PyValue::Kind k) {
  static constexpr std::array<const char*, 12> names{"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "tensor", "global", "object"};
  return names[static_cast<size_t>(k)];
}

Py make(PyValue::Kind k) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  return v;
}

// torch.save's storage classes, by the name its persistent ids give them.
const std::map<std::string, torch::ScalarType, std::less<>>& storage_types() {
  static const std::map<std::string, torch::ScalarType, std::less<>> types{
      {"torch.FloatStorage", torch::kFloat},      {"torch.DoubleStorage", torch::kDouble}, {"torch.HalfStorage", torch::kHalf},
      {"torch.BFloat16Storage", torch::kBFloat16}, {"torch.LongStorage", torch::kLong},     {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},      {"torch.CharStorage", torch::kChar},     {"torch.ByteStorage", torch::kByte},
      {"torch.BoolStorage", torch::kBool}};
  return types;
}

// The globals a checkpoint may name. Builders become data; the rest stay inert
// Objects (their class name and arguments). Anything else is refused.
bool allowed_global(const std::string& name) {
  static const char* const exact[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
                                      "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state", "torch.Size",
                                      "torch.device", "_codecs.encode", "argparse.Namespace", "builtins.set", "builtins.frozenset",
                                      "builtins.slice", "builtins.complex", "io.BytesIO", "torch.serialization._get_layout",
                                      "torch._tensor._rebuild_from_type_v2", "torch.Tensor", "torch.nn.parameter.Parameter"};
  for (const char* e : exact)
    if (name == e) return true;
  if (storage_types().count(name)) return true;
  // Torch dtypes (params_dtype in Megatron's args), numpy arrays and dtypes (its RNG state), and
  // the enums and config objects of Megatron and DeepSpeed (their args and engine states).
  for (const char* prefix : {"numpy.", "megatron.", "deepspeed.", "enum."})
    if (name.rfind(prefix, 0) == 0) return true;
  static const char* const dtypes[] = {"float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long", "int32",
                                       "int", "int16", "short", "int8", "uint8", "bool", "complex64", "complex128"};
  for (const char* d : dtypes)
    if (name == std::string("torch.") + d) return true;
  return false;
}

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::function<torch::Tensor(const std::string&, torch::ScalarType, int64_t)>& storage,
            const std::string& where)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), begin_(p_), end_(p_ + bytes.size()), storage_(storage), where_(where) {}

  PyValue run();

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(ErrorKind::Format, "%s: pickle byte %ld: %s", where_.c_str(), static_cast<long>(op_at_ - begin_), msg.c_str());
  }
  const uint8_t* take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated (the pickle ends inside an opcode)");
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  template <typename T>
  T le() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (!nl) fail("truncated (a text argument has no end of line)");
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    return s;
  }
  Py pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("the stack is empty");
    Py v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Py& top() {
    if (stack_.empty()) fail("the stack is empty");
    return stack_.back();
  }
  std::vector<Py> pop_mark() {
    if (marks_.empty()) fail("no mark");
    std::vector<Py> out(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  void push_str(PyValue::Kind k, size_t n) {
    Py v = make(k);
    v->s.assign(reinterpret_cast<const char*>(take(n)), n);
    stack_.push_back(v);
  }
  void push_int(int64_t i) {
    Py v = make(PyValue::Kind::Int);
    v->i = i;
    stack_.push_back(v);
  }
  void push_global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    if (!allowed_global(full))
      fail("refused the global " + full + ": it is not something a Megatron, DeepSpeed or zerolm checkpoint holds (zerolm never runs pickled code)");
    Py v = make(PyValue::Kind::Global);
    v->s = full;
    stack_.push_back(v);
  }
  Py tuple(std::vector<Py> items) {
    Py v = make(PyValue::Kind::Tuple);
    v->items = std::move(items);
    return v;
  }
  void set_items(Py& dict, const std::vector<Py>& kv);
  Py call(const Py& callable, const Py& args);
  Py rebuild_tensor(const std::vector<Py>& a);
  Py persistent(const Py& pid);
  bool step();
  bool scalar_op(uint8_t op);
  bool container_op(uint8_t op);
  bool object_op(uint8_t op);
  bool stack_op(uint8_t op);

  const uint8_t *p_, *begin_, *end_, *op_at_ = nullptr;
  const std::function<torch::Tensor(const std::string&, torch::ScalarType, int64_t)>& storage_;
  const std::string& where_;
  std::vector<Py> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Py> memo_;
};

void Unpickler::set_items(Py& dict, const std::vector<Py>& kv) {
  if (kv.size() % 2) fail("SETITEMS with an odd number of items");
  if (dict->kind == PyValue::Kind::Object) {  // an object's items (OrderedDict subclasses): keep them as its state
    if (!dict->state) dict->state = make(PyValue::Kind::Dict);
    for (size_t k = 0; k < kv.size(); k += 2) dict->state->entries.emplace_back(kv[k], kv[k + 1]);
    return;
  }
  if (dict->kind != PyValue::Kind::Dict) fail(std::string("SETITEM on a ") + std::string(kind_name(dict->kind)));
  for (size_t k = 0; k < kv.size(); k += 2) {
    bool replaced = false;
    if (kv[k]->kind == PyValue::Kind::Str)
      for (auto& e : dict->entries)
        if (e.first->kind == PyValue::Kind::Str && e.first->s == kv[k]->s) {
          e.second = kv[k + 1];
          replaced = true;
        }
    if (!replaced) dict->entries.emplace_back(kv[k], kv[k + 1]);
  }
}

Py Unpickler::persistent(const Py& pid) {
  // ('storage', storage class, key, location, numel)
  if (pid->kind != PyValue::Kind::Tuple || pid->items.size() < 5 || pid->items[0]->s != "storage")
    fail(std::string("a persistent id that is not a tensor storage (") + pid->describe() + ")");
  const auto& types = storage_types();
  auto t = types.find(pid->items[1]->s);
  if (t == types.end()) fail(std::string("an unknown storage class ") + pid->items[1]->s);
  Py v = make(PyValue::Kind::Tensor);
  v->tensor = storage_(pid->items[2]->as_str(), t->second, pid->items[4]->as_int());
  return v;
}

Py Unpickler::rebuild_tensor(const std::vector<Py>& a) {
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  if (a.size() < 4 || a[0]->kind != PyValue::Kind::Tensor) fail("a tensor rebuild without a storage");
  std::vector<int64_t> size, stride;
  for (const auto& x : a[2]->items) size.push_back(x->as_int());
  for (const auto& x : a[3]->items) stride.push_back(x->as_int());
  const torch::Tensor& st = a[0]->tensor;
  const int64_t offset = a[1]->as_int();
  int64_t last = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] == 0) last = -1;
    if (last >= 0) last += (size[d] - 1) * stride[d];
  }
  if (last >= st.numel() || offset < 0) fail("a tensor reaches past the end of its storage");
  Py v = make(PyValue::Kind::Tensor);
  v->tensor = st.as_strided(size, stride, offset);
  return v;
}

Py Unpickler::call(const Py& callable, const Py& args) {
  if (callable->kind != PyValue::Kind::Global) fail(std::string("a call of a ") + std::string(kind_name(callable->kind)));
  const std::string& f = callable->s;
  const std::vector<Py>& a = args->items;
  if (f == "collections.OrderedDict" || f == "builtins.set" || f == "builtins.frozenset") {
    Py v = make(f == "collections.OrderedDict" ? PyValue::Kind::Dict : PyValue::Kind::List);
    if (a.empty() || a[0]->kind == PyValue::Kind::None) return v;
    if (v->kind == PyValue::Kind::List) {
      v->items = a[0]->items;
      return v;
    }
    std::vector<Py> kv;
    for (const auto& pair : a[0]->items) {
      if (pair->items.size() != 2) fail("an OrderedDict built from something other than pairs");
      kv.insert(kv.end(), pair->items.begin(), pair->items.end());
    }
    set_items(v, kv);
    return v;
  }
  if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") return rebuild_tensor(a);
  if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
    if (a.empty() || a[0]->kind != PyValue::Kind::Tensor) fail("a parameter rebuild without a tensor");
    return a[0];
  }
  if (f == "torch.Size" && a.size() == 1) return tuple(a[0]->items);
  // A tensor of a subclass (DeepSpeed's ZeRO-3 partitions): the rebuilt tensor is the data; its
  // type (torch.Tensor, Parameter) and attributes (ds_id) are dropped.
  if (f == "torch._tensor._rebuild_from_type_v2" && a.size() >= 3 && a[2]->kind == PyValue::Kind::Tuple) return call(a[0], a[2]);
  if (f == "_codecs.encode" && !a.empty() && a[0]->kind == PyValue::Kind::Str) {  // protocol 2's bytes: latin-1 of a str
    Py v = make(PyValue::Kind::Bytes);
    const std::string& u = a[0]->s;  // UTF-8; every code point is < 256
    for (size_t k = 0; k < u.size(); ++k) {
      const auto c = static_cast<unsigned char>(u[k]);
      if (c < 0x80) {
        v->s.push_back(static_cast<char>(c));
      } else if ((c & 0xE0) == 0xC0 && k + 1 < u.size()) {
        v->s.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(u[++k]) & 0x3F)));
      } else {
        fail("_codecs.encode of a character beyond latin-1");
      }
    }
    return v;
  }
  Py v = make(PyValue::Kind::Object);  // inert: its class and arguments, never built
  v->s = f;
  v->items = a;
  return v;
}

// One opcode; false at STOP.
// Opcodes that push a scalar: None, booleans, integers, floats, strings and bytes; false when `op` is none of them.
bool Unpickler::scalar_op(uint8_t op) {
  using K = PyValue::Kind;
  switch (op) {
    case 'N': stack_.push_back(make(K::None)); break;
    case 0x88: case 0x89: {          // NEWTRUE, NEWFALSE
      Py v = make(K::Bool);
      v->b = op == 0x88;
      stack_.push_back(v);
      break;
    }
    case 'J': push_int(le<int32_t>()); break;
    case 'K': push_int(le<uint8_t>()); break;
    case 'M': push_int(le<uint16_t>()); break;
    case 0x8a: case 0x8b: {          // LONG1, LONG4: little-endian two's complement
      const uint32_t n = op == 0x8a ? le<uint8_t>() : le<uint32_t>();
      if (n > 8) fail("an integer wider than 64 bits");
      const uint8_t* b = take(n);
      uint64_t u = 0;
      for (uint32_t k = 0; k < n; ++k) u |= static_cast<uint64_t>(b[k]) << (8 * k);
      if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);
      push_int(static_cast<int64_t>(u));
      break;
    }
    case 'I': {                      // INT (text)
      const std::string t = line();
      Py v = make(t == "01" || t == "00" ? K::Bool : K::Int);
      v->b = t == "01";
      v->i = std::strtoll(t.c_str(), nullptr, 10);
      stack_.push_back(v);
      break;
    }
    case 'G': {                      // BINFLOAT: big-endian double
      const uint8_t* b = take(8);
      uint64_t u = 0;
      for (int k = 0; k < 8; ++k) u = (u << 8) | b[k];
      Py v = make(K::Float);
      std::memcpy(&v->f, &u, 8);
      stack_.push_back(v);
      break;
    }
    case 'X': push_str(K::Str, le<uint32_t>()); break;
    case 0x8c: push_str(K::Str, le<uint8_t>()); break;
    case 0x8d: push_str(K::Str, le<uint64_t>()); break;
    case 'B': push_str(K::Bytes, le<uint32_t>()); break;
    case 'C': push_str(K::Bytes, le<uint8_t>()); break;
    case 0x8e: push_str(K::Bytes, le<uint64_t>()); break;
    default: return false;
  }
  return true;
}

// Opcodes that build or fill tuples, lists, sets and dicts; false when `op` is none of them.
bool Unpickler::container_op(uint8_t op) {
  using K = PyValue::Kind;
  switch (op) {
    case '}': stack_.push_back(make(K::Dict)); break;
    case ']': stack_.push_back(make(K::List)); break;
    case 0x8f: stack_.push_back(make(K::List)); break;  // EMPTY_SET
    case ')': stack_.push_back(tuple({})); break;
    case 't': stack_.push_back(tuple(pop_mark())); break;
    case 'l': {                      // LIST
      Py v = make(K::List);
      v->items = pop_mark();
      stack_.push_back(v);
      break;
    }
    case 'd': {                      // DICT
      Py v = make(K::Dict);
      set_items(v, pop_mark());
      stack_.push_back(v);
      break;
    }
    case 0x85: case 0x86: case 0x87: {  // TUPLE1-3
      std::vector<Py> items(op - 0x84);
      for (size_t k = items.size(); k-- > 0;) items[k] = pop();
      stack_.push_back(tuple(std::move(items)));
      break;
    }
    case 'a': {                      // APPEND
      Py v = pop();
      top()->items.push_back(v);
      break;
    }
    case 'e': case 0x90: {           // APPENDS, ADDITEMS
      std::vector<Py> items = pop_mark();
      Py& l = top();
      l->items.insert(l->items.end(), items.begin(), items.end());
      break;
    }
    case 's': {                      // SETITEM
      Py v = pop(), k = pop();
      set_items(top(), {k, v});
      break;
    }
    case 'u': {                      // SETITEMS
      std::vector<Py> kv = pop_mark();
      set_items(top(), kv);
      break;
    }
    default: return false;
  }
  return true;
}

// Opcodes that make objects: globals, calls, state, persistent ids (tensors); false when `op` is none of them.
bool Unpickler::object_op(uint8_t op) {
  using K = PyValue::Kind;
  switch (op) {
    case 'c': {                      // GLOBAL
      const std::string module = line();
      push_global(module, line());
      break;
    }
    case 0x93: {                     // STACK_GLOBAL
      Py name = pop(), module = pop();
      push_global(module->as_str(), name->as_str());
      break;
    }
    case 'R': {                      // REDUCE
      Py args = pop(), f = pop();
      stack_.push_back(call(f, args));
      break;
    }
    case 0x81: {                     // NEWOBJ
      Py args = pop(), cls = pop();
      stack_.push_back(call(cls, args));
      break;
    }
    case 'b': {                      // BUILD: an object's state (a tensor's or dict's is dropped)
      Py st = pop();
      if (top()->kind == K::Object) top()->state = st;
      break;
    }
    case 'Q': {                      // BINPERSID
      Py pid = pop();
      stack_.push_back(persistent(pid));
      break;
    }
    default: return false;
  }
  return true;
}

// The memo and the stack: store, fetch, pop, duplicate; false when `op` is none of them.
bool Unpickler::stack_op(uint8_t op) {
  switch (op) {
    case 'q': memo_[le<uint8_t>()] = top(); break;
    case 'r': memo_[le<uint32_t>()] = top(); break;
    case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
    case 'p': memo_[std::strtoull(line().c_str(), nullptr, 10)] = top(); break;
    case 'h': case 'j': case 'g': {  // BINGET, LONG_BINGET, GET
      const uint64_t k = op == 'h' ? le<uint8_t>() : op == 'j' ? le<uint32_t>() : std::strtoull(line().c_str(), nullptr, 10);
      auto it = memo_.find(k);
      if (it == memo_.end()) fail("a memo entry that was never stored");
      stack_.push_back(it->second);
      break;
    }
    case '0': pop(); break;          // POP
    case '1': pop_mark(); break;     // POP_MARK
    case '2': stack_.push_back(top()); break;  // DUP
    default: return false;
  }
  return true;
}

// One opcode; false at STOP. Unknown opcodes are an error naming the byte.
bool Unpickler::step() {
  op_at_ = p_;
  const uint8_t op = *take(1);
  switch (op) {
    case 0x80: take(1); return true;  // PROTO
    case 0x95: take(8); return true;  // FRAME
    case '.': return false;           // STOP
    case '(': marks_.push_back(stack_.size()); return true;
    default: break;
  }
  if (scalar_op(op) || container_op(op) || object_op(op) || stack_op(op)) return true;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  fail(std::string("unknown pickle opcode ") + hex);
}

PyValue Unpickler::run() {
  while (step()) {
  }
  if (stack_.size() != 1 || !marks_.empty()) fail(std::string("the pickle ends with ") + std::to_string(stack_.size()) + " values on the stack");
  return *stack_.back();
}

}  // namespace

const PyValue* PyValue::find(std::string_view key) const {
  const PyValue* d = this;
  if (kind == Kind::Object) d = state.get();
  if (!d || d->kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : d->entries)
    if (k->kind == Kind::Str && k->s == key) return v.get();
  return nullptr;
}

const PyValue* PyValue::find_int(int64_t key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k->kind == Kind::Int && k->i == key) return v.get();
  return nullptr;
}

const PyValue& PyValue::at(std::string_view key) const {
  const PyValue* v = find(key);
  if (!v) throw Error(ErrorKind::Format, "no entry '%.*s' in a %s", static_cast<int>(key.size()), key.data(), describe().c_str());
  return *v;
}

int64_t PyValue::as_int() const {
  if (kind == Kind::Int) return i;
  if (kind == Kind::Bool) return b;
  throw Error(ErrorKind::Format, "expected an int, found a %s", describe().c_str());
}

double PyValue::as_float() const {
  if (kind == Kind::Float) return f;
  if (kind == Kind::Int) return static_cast<double>(i);
  throw Error(ErrorKind::Format, "expected a float, found a %s", describe().c_str());
}

const std::string& PyValue::as_str() const {
  if (kind != Kind::Str) throw Error(ErrorKind::Format, "expected a str, found a %s", describe().c_str());
  return s;
}

const torch::Tensor& PyValue::as_tensor() const {
  if (kind != Kind::Tensor) throw Error(ErrorKind::Format, "expected a tensor, found a %s", describe().c_str());
  return tensor;
}

std::string PyValue::describe() const {
  switch (kind) {
    case Kind::Dict: return "dict of " + std::to_string(entries.size());
    case Kind::List: case Kind::Tuple: return std::string(kind_name(kind)) + " of " + std::to_string(items.size());
    case Kind::Tensor: {
      std::string out = std::string("tensor ") + c10::toString(tensor.scalar_type()) + " [";
      for (int64_t d = 0; d < tensor.dim(); ++d) out += (d ? ", " : "") + std::to_string(tensor.size(d));
      return out + "]";
    }
    case Kind::Global: case Kind::Object: return s;
    case Kind::Str: return "str '" + s.substr(0, 40) + "'";
    default: return kind_name(kind);
  }
}

PyValue unpickle(std::string_view bytes, const std::function<torch::Tensor(const std::string&, torch::ScalarType, int64_t)>& storage,
                 const std::string& where) {
  return Unpickler(bytes, storage, where).run();
}

PyValue load_torch_file(const std::string& path, TensorData data) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Format, "%s: not a torch.save zip archive (or a damaged one): %s", path.c_str(), e.what_without_backtrace());
  }
  auto record = [&](const std::string& name) {
    try {
      auto [data, size] = zip->getRecord(name);
      return std::make_pair(std::move(data), size);
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::Format, "%s: cannot read its record %s: %s", path.c_str(), name.c_str(), e.what_without_backtrace());
    }
  };
  if (zip->hasRecord("byteorder")) {
    auto [data, size] = record("byteorder");
    if (std::string(static_cast<const char*>(data.get()), size) != "little")
      throw Error(ErrorKind::Format, "%s: big-endian tensors are not supported", path.c_str());
  }
  std::map<std::string, torch::Tensor> storages;  // shared by every tensor that views them
  auto storage = [&](const std::string& key, torch::ScalarType dtype, int64_t numel) {
    auto it = storages.find(key);
    if (it != storages.end()) return it->second;
    if (data == TensorData::kShapesOnly) return storages[key] = torch::empty({numel}, torch::TensorOptions().dtype(dtype).device(torch::kMeta));
    auto [data, size] = record("data/" + key);
    const auto bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
    if (size < bytes)
      throw Error(ErrorKind::Format, "%s: storage data/%s has %zu bytes, %zu expected", path.c_str(), key.c_str(), size, bytes);
    torch::Tensor t = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (bytes) std::memcpy(t.data_ptr(), data.get(), bytes);
    return storages[key] = t;
  };
  auto [pkl, size] = record("data.pkl");
  return unpickle(std::string_view(static_cast<const char*>(pkl.get()), size), storage, path + " (data.pkl)");
}

}  // namespace zlm::trainer

namespace zlm::trainer {

namespace {

// Protocol-2 pickling of a PyValue tree, with tensors as torch.save's persistent storages.
class Pickler {
 public:
  std::string out;
  std::vector<torch::Tensor> storages;  // record data/<index>

  void value(const PyValue& v) {
    using K = PyValue::Kind;
    switch (v.kind) {
      case K::None: op('N'); break;
      case K::Bool: op(v.b ? 0x88 : 0x89); break;
      case K::Int: integer(v.i); break;
      case K::Float: {
        uint64_t u;
        std::memcpy(&u, &v.f, 8);
        op('G');
        for (int k = 7; k >= 0; --k) out.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
        break;
      }
      case K::Str: str(v.s); break;
      case K::Tuple:
        op('(');
        for (const auto& x : v.items) value(*x);
        op('t');
        break;
      case K::List:
        op(']');
        if (v.items.empty()) break;
        op('(');
        for (const auto& x : v.items) value(*x);
        op('e');  // APPENDS
        break;
      case K::Dict: {
        global("collections", "OrderedDict");
        op(')');
        op('R');
        items(v);
        break;
      }
      case K::Tensor: tensor(v.tensor); break;
      case K::Global: {
        const size_t dot = v.s.rfind('.');
        global(v.s.substr(0, dot), v.s.substr(dot + 1));
        break;
      }
      case K::Object: {
        const size_t dot = v.s.rfind('.');
        if (dot == std::string::npos) throw Error(ErrorKind::Internal, "save_torch_file: cannot write an object of class '%s'", v.s.c_str());
        global(v.s.substr(0, dot), v.s.substr(dot + 1));
        op('(');
        for (const auto& x : v.items) value(*x);
        op('t');
        if (!v.state) {  // cls(*args): torch.Size((d0, d1)), an enum's member by value
          op('R');
          break;
        }
        op(0x81);  // NEWOBJ: cls.__new__(cls, *args), then BUILD sets its __dict__ (argparse.Namespace, a plain class)
        op('}');
        items(*v.state);
        op('b');
        break;
      }
      default: throw Error(ErrorKind::Internal, "save_torch_file: cannot write a %s", v.describe().c_str());
    }
  }

 private:
  void op(int c) { out.push_back(static_cast<char>(c)); }
  void u32(uint32_t n) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((n >> (8 * k)) & 0xFF));
  }
  void str(const std::string& s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void integer(int64_t i) {
    if (i >= INT32_MIN && i <= INT32_MAX) {
      op('J');
      u32(static_cast<uint32_t>(static_cast<int32_t>(i)));
      return;
    }
    op(0x8a);  // LONG1, 8 bytes little-endian two's complement
    out.push_back(8);
    for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((static_cast<uint64_t>(i) >> (8 * k)) & 0xFF));
  }
  void global(const std::string& module, const std::string& name) {
    op('c');
    out += module + "\n" + name + "\n";
  }
  void items(const PyValue& d) {
    if (d.entries.empty()) return;
    op('(');
    for (const auto& [k, x] : d.entries) {
      value(*k);
      value(*x);
    }
    op('u');
  }
  void ints(c10::IntArrayRef v) {
    op('(');
    for (int64_t x : v) integer(x);
    op('t');
  }
  void tensor(const torch::Tensor& t) {
    static const std::map<torch::ScalarType, const char*> names{{torch::kFloat, "FloatStorage"}, {torch::kDouble, "DoubleStorage"},
                                                                {torch::kHalf, "HalfStorage"},   {torch::kBFloat16, "BFloat16Storage"},
                                                                {torch::kLong, "LongStorage"},   {torch::kInt, "IntStorage"},
                                                                {torch::kByte, "ByteStorage"},   {torch::kBool, "BoolStorage"}};
    auto name = names.find(t.scalar_type());
    if (name == names.end()) throw Error(ErrorKind::Internal, "save_torch_file: no storage class for %s", c10::toString(t.scalar_type()));
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const std::string key = std::to_string(storages.size());
    storages.push_back(c);
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');  // the persistent id: ('storage', class, key, location, numel)
    str("storage");
    global("torch", name->second);
    str(key);
    str("cpu");
    integer(c.numel());
    op('t');
    op('Q');  // BINPERSID
    integer(0);
    ints(c.sizes());
    ints(c.strides());
    op(0x89);  // requires_grad False
    global("collections", "OrderedDict");
    op(')');
    op('R');
    op('t');
    op('R');
  }
};

template <typename Set>
std::shared_ptr<PyValue> made(PyValue::Kind k, Set&& set) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  set(*v);
  return v;
}

}  // namespace

std::shared_ptr<PyValue> py_int(int64_t i) { return made(PyValue::Kind::Int, [&](PyValue& v) { v.i = i; }); }
std::shared_ptr<PyValue> py_float(double f) { return made(PyValue::Kind::Float, [&](PyValue& v) { v.f = f; }); }
std::shared_ptr<PyValue> py_bool(bool b) { return made(PyValue::Kind::Bool, [&](PyValue& v) { v.b = b; }); }
std::shared_ptr<PyValue> py_str(std::string s) { return made(PyValue::Kind::Str, [&](PyValue& v) { v.s = std::move(s); }); }
std::shared_ptr<PyValue> py_none() { return made(PyValue::Kind::None, [](PyValue&) {}); }
std::shared_ptr<PyValue> py_tensor(torch::Tensor t) { return made(PyValue::Kind::Tensor, [&](PyValue& v) { v.tensor = std::move(t); }); }
std::shared_ptr<PyValue> py_global(std::string name) { return made(PyValue::Kind::Global, [&](PyValue& v) { v.s = std::move(name); }); }
std::shared_ptr<PyValue> py_dict() { return made(PyValue::Kind::Dict, [](PyValue&) {}); }
std::shared_ptr<PyValue> py_list() { return made(PyValue::Kind::List, [](PyValue&) {}); }
std::shared_ptr<PyValue> py_size(const std::vector<int64_t>& dims) {
  auto t = made(PyValue::Kind::Tuple, [](PyValue&) {});
  for (int64_t d : dims) t->items.push_back(py_int(d));
  return made(PyValue::Kind::Object, [&](PyValue& v) {
    v.s = "torch.Size";
    v.items.push_back(t);
  });
}
std::shared_ptr<PyValue> py_namespace(std::shared_ptr<PyValue> fields) { return py_object("argparse.Namespace", std::move(fields)); }
std::shared_ptr<PyValue> py_object(std::string cls, std::shared_ptr<PyValue> fields) {
  return made(PyValue::Kind::Object, [&](PyValue& v) {
    v.s = std::move(cls);
    v.state = std::move(fields);
  });
}
std::shared_ptr<PyValue> py_tuple(std::vector<std::shared_ptr<PyValue>> items) {
  return made(PyValue::Kind::Tuple, [&](PyValue& v) { v.items = std::move(items); });
}

void save_torch_file(const std::string& path, const PyValue& v) {
  Pickler p;
  p.out = "\x80\x02";
  p.value(v);
  p.out.push_back('.');
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    caffe2::serialize::PyTorchStreamWriter zip(tmp);
    zip.writeRecord("data.pkl", p.out.data(), p.out.size());
    zip.writeRecord("byteorder", "little", 6);
    for (size_t k = 0; k < p.storages.size(); ++k) {
      const torch::Tensor& t = p.storages[k];
      zip.writeRecord("data/" + std::to_string(k), t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
    }
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    std::filesystem::remove(tmp);
    throw Error(ErrorKind::Io, "%s: cannot write it: %s", path.c_str(), e.what_without_backtrace());
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace zlm::trainer
