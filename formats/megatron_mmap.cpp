#include "formats/megatron_mmap.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "common/core/error.h"
#include "common/core/mapped_file.h"
#include "common/core/output_file.h"

namespace zlm::formats {

size_t dtype_size(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    default: return 0;
  }
}

const char* dtype_name(uint8_t code) {
  switch (code) {
    case 1: return "uint8";
    case 2: return "int8";
    case 3: return "int16";
    case 4: return "int32";
    case 5: return "int64";
    case 6: return "float64";
    case 7: return "float32";
    case 8: return "uint16";
    default: return "unknown";
  }
}

bool dtype_is_integer(DType dtype) { return dtype != DType::Float32 && dtype != DType::Float64; }

DType best_fitting_dtype(uint64_t vocab_size) { return vocab_size < 65500 ? DType::UInt16 : DType::Int32; }

std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// ---- reading -----------------------------------------------------------------

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::Format, "%s: %s ---> HINT: the file is damaged, truncated or not a Megatron MMIDIDX index",
              name.c_str(), what.c_str());
}

struct IdxLayout {
  uint8_t code = 0;
  uint64_t n = 0, m = 0;
  bool multimodal = false;
};

IdxLayout parse_header(const uint8_t* data, uint64_t size, const std::string& name) {
  if (size < kIdxHeaderBytes)
    bad(name, strprintf("truncated: %lu bytes, the header alone needs %lu", (unsigned long)size, (unsigned long)kIdxHeaderBytes));
  if (std::memcmp(data, kMmidIdxMagic, sizeof kMmidIdxMagic) != 0) {
    if (std::memcmp(data, "TNTIDX\0\0", 8) == 0)
      bad(name, "byte 0: magic TNTIDX is the legacy lazy/cached format, not mmap (convert it with Megatron first)");
    bad(name, "byte 0: wrong magic (expected \"MMIDIDX\\0\\0\")");
  }
  uint64_t version = load_unaligned<uint64_t>(data + 9);
  if (version != kMmidIdxVersion) bad(name, strprintf("byte 9: unknown version %lu (expected 1)", (unsigned long)version));
  IdxLayout l;
  l.code = data[17];
  if (dtype_size(l.code) == 0) bad(name, strprintf("byte 17: unknown dtype code %u (known: 1-8)", l.code));
  l.n = load_unaligned<uint64_t>(data + 18);
  l.m = load_unaligned<uint64_t>(data + 26);
  // Guard the size arithmetic against absurd counts before multiplying.
  if (l.n > size || l.m > size) bad(name, strprintf("byte 18: counts N=%lu M=%lu cannot fit a %lu-byte file",
                                                   (unsigned long)l.n, (unsigned long)l.m, (unsigned long)size));
  uint64_t plain = kIdxHeaderBytes + 12 * l.n + 8 * l.m;
  if (size == plain) return l;
  if (size == plain + l.n) {
    l.multimodal = true;
    return l;
  }
  if (size < plain)
    bad(name, strprintf("truncated: %lu bytes, but N=%lu sequences and M=%lu doc_idx entries need %lu",
                        (unsigned long)size, (unsigned long)l.n, (unsigned long)l.m, (unsigned long)plain));
  bad(name, strprintf("size %lu does not match N=%lu, M=%lu (expected %lu, or %lu for multimodal)", (unsigned long)size,
                      (unsigned long)l.n, (unsigned long)l.m, (unsigned long)plain, (unsigned long)(plain + l.n)));
}

// Checks sizes/pointers/doc_idx; returns the total token count.
uint64_t check_arrays(const uint8_t* data, const IdxLayout& l, uint64_t bin_size, const std::string& name) {
  const uint8_t* sizes = data + kIdxHeaderBytes;
  const uint8_t* pointers = sizes + 4 * l.n;
  const uint8_t* doc_idx = pointers + 8 * l.n;
  const uint64_t item = dtype_size(l.code);
  uint64_t expected_ptr = 0, total = 0;
  for (uint64_t i = 0; i < l.n; ++i) {
    int32_t sz = load_unaligned<int32_t>(sizes + 4 * i);
    int64_t ptr = load_unaligned<int64_t>(pointers + 8 * i);
    if (sz < 0) bad(name, strprintf("sizes[%lu] = %d is negative", (unsigned long)i, sz));
    if (ptr < 0 || static_cast<uint64_t>(ptr) != expected_ptr)
      bad(name, strprintf("pointers[%lu] = %ld, expected %lu (sum of the previous sizes x %lu bytes)", (unsigned long)i,
                          (long)ptr, (unsigned long)expected_ptr, (unsigned long)item));
    uint64_t end = expected_ptr + static_cast<uint64_t>(sz) * item;
    if (end > bin_size)
      bad(name, strprintf("sequence %lu ends at byte %lu but the .bin has only %lu bytes (truncated .bin?)",
                          (unsigned long)i, (unsigned long)end, (unsigned long)bin_size));
    expected_ptr = end;
    total += static_cast<uint64_t>(sz);
  }
  if (l.m == 0) bad(name, "doc_idx is empty (it must hold at least the leading 0)");
  int64_t prev = 0;
  for (uint64_t k = 0; k < l.m; ++k) {
    int64_t d = load_unaligned<int64_t>(doc_idx + 8 * k);
    if (k == 0 && d != 0) bad(name, strprintf("doc_idx[0] = %ld, expected 0", (long)d));
    if (d < prev)
      bad(name, strprintf("doc_idx is not monotonic: doc_idx[%lu] = %ld < doc_idx[%lu] = %ld", (unsigned long)k,
                          (long)d, (unsigned long)(k - 1), (long)prev));
    prev = d;
  }
  if (static_cast<uint64_t>(prev) != l.n)
    bad(name, strprintf("doc_idx[%lu] = %ld, expected N = %lu", (unsigned long)(l.m - 1), (long)prev, (unsigned long)l.n));
  if (expected_ptr != bin_size)
    bad(name, strprintf("the .bin has %lu bytes but the index describes %lu", (unsigned long)bin_size,
                        (unsigned long)expected_ptr));
  return total;
}

}  // namespace

void validate_idx_bytes(const uint8_t* data, uint64_t size, uint64_t bin_size, const std::string& name) {
  IdxLayout l = parse_header(data, size, name);
  check_arrays(data, l, bin_size, name);
}

MegatronReader::MegatronReader(const std::string& prefix)
    : prefix_(prefix), idx_file_(idx_path(prefix)), bin_file_(bin_path(prefix)) {
  idx_ = idx_file_.data();
  bin_ = bin_file_.data();
  idx_size_ = idx_file_.size();
  bin_size_ = bin_file_.size();
  validate();
}

MegatronReader::~MegatronReader() = default;

void MegatronReader::validate() {
  const std::string name = idx_path(prefix_);
  IdxLayout l = parse_header(idx_, idx_size_, name);
  dtype_ = static_cast<DType>(l.code);
  item_size_ = dtype_size(l.code);
  n_ = l.n;
  m_ = l.m;
  multimodal_ = l.multimodal;
  sizes_ = idx_ + kIdxHeaderBytes;
  pointers_ = sizes_ + 4 * n_;
  doc_idx_ = pointers_ + 8 * n_;
  modes_ = multimodal_ ? doc_idx_ + 8 * m_ : nullptr;
  total_tokens_ = check_arrays(idx_, l, bin_size_, name);
}

std::vector<int64_t> MegatronReader::sequence_tokens(uint64_t i, int64_t offset, int64_t length) const {
  if (i >= n_) throw Error(ErrorKind::Usage, "%s: sequence %lu out of range (N = %lu)", prefix_.c_str(), (unsigned long)i, (unsigned long)n_);
  int64_t sz = size(i);
  if (length < 0) length = sz - offset;
  if (offset < 0 || length < 0 || offset + length > sz)
    throw Error(ErrorKind::Usage, "%s: sequence %lu: range [%ld, %ld) outside its %ld tokens", prefix_.c_str(),
                (unsigned long)i, (long)offset, (long)(offset + length), (long)sz);
  if (!dtype_is_integer(dtype_)) throw Error(ErrorKind::Usage, "%s: dtype %s holds no token ids", prefix_.c_str(), dtype_name(static_cast<uint8_t>(dtype_)));
  std::vector<int64_t> out(static_cast<size_t>(length));
  const uint8_t* p = sequence_data(i) + offset * static_cast<int64_t>(item_size_);
  for (int64_t k = 0; k < length; ++k, p += item_size_) {
    switch (dtype_) {
      case DType::UInt8: out[k] = *p; break;
      case DType::Int8: out[k] = static_cast<int8_t>(*p); break;
      case DType::Int16: out[k] = load_unaligned<int16_t>(p); break;
      case DType::UInt16: out[k] = load_unaligned<uint16_t>(p); break;
      case DType::Int32: out[k] = load_unaligned<int32_t>(p); break;
      case DType::Int64: out[k] = load_unaligned<int64_t>(p); break;
      default: break;
    }
  }
  return out;
}

// ---- writing -----------------------------------------------------------------

struct MegatronWriter::Impl {
  std::unique_ptr<OutputFile> bin, idx;  // both created at once: a path that cannot be written fails before any work
  std::vector<uint8_t> scratch;
};

MegatronWriter::MegatronWriter(std::string prefix, DType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), doc_idx_{0}, impl_(new Impl) {
  if (dtype_size(static_cast<uint8_t>(dtype)) == 0) throw Error(ErrorKind::Usage, "unknown dtype code %d", (int)dtype);
  try {
    impl_->bin = std::make_unique<OutputFile>(bin_path(prefix_));
    impl_->idx = std::make_unique<OutputFile>(idx_path(prefix_));
  } catch (...) {
    delete impl_;  // the destructor does not run: the .bin's temporary goes here
    throw;
  }
}

MegatronWriter::~MegatronWriter() { delete impl_; }

uint64_t MegatronWriter::bin_bytes() const { return impl_->bin ? impl_->bin->bytes_written() : 0; }

namespace {

// Each id as the dtype's D, little-endian, one type switch per call rather than per id (a loop
// the compiler vectorises).
template <typename D, typename T>
void store_ids(std::span<const T> tokens, uint8_t* out) {
  for (size_t k = 0; k < tokens.size(); ++k) {
    const D x = static_cast<D>(tokens[k]);
    std::memcpy(out + sizeof(D) * k, &x, sizeof(D));
  }
}

// The first id outside [lo, hi], if any: none to look for when T holds no other value (int32 ids
// into an int32 file), else one branch-free min/max pass in the common case.
template <typename T>
const T* first_out_of_range(std::span<const T> tokens, int64_t lo, int64_t hi) {
  if (static_cast<int64_t>(std::numeric_limits<T>::min()) >= lo && static_cast<int64_t>(std::numeric_limits<T>::max()) <= hi) return nullptr;
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::min();
  for (T v : tokens) mn = std::min(mn, v), mx = std::max(mx, v);
  if (tokens.empty() || (static_cast<int64_t>(mn) >= lo && static_cast<int64_t>(mx) <= hi)) return nullptr;
  for (const T& v : tokens)
    if (static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi) return &v;
  return nullptr;
}

}  // namespace

template <typename T>
void MegatronWriter::append_tokens(std::span<const T> tokens) {
  const size_t item = dtype_size(static_cast<uint8_t>(dtype_));
  auto& buf = impl_->scratch;
  buf.resize(tokens.size() * item);
  uint8_t* out = buf.data();
  auto fits = [&](int64_t lo, int64_t hi) {
    if (const T* bad = first_out_of_range(tokens, lo, hi))
      throw Error(ErrorKind::Format, "%s: token id %ld does not fit dtype %s ---> HINT: use a wider dtype (vocab >= 65500 needs int32)",
                  bin_path(prefix_).c_str(), static_cast<long>(*bad), dtype_name(static_cast<uint8_t>(dtype_)));
  };
  switch (dtype_) {
    case DType::UInt16: fits(0, 65535); store_ids<uint16_t>(tokens, out); break;
    case DType::Int32: fits(INT32_MIN, INT32_MAX); store_ids<int32_t>(tokens, out); break;
    case DType::UInt8: fits(0, 255); store_ids<uint8_t>(tokens, out); break;
    case DType::Int8: fits(-128, 127); store_ids<int8_t>(tokens, out); break;
    case DType::Int16: fits(INT16_MIN, INT16_MAX); store_ids<int16_t>(tokens, out); break;
    case DType::Int64: store_ids<int64_t>(tokens, out); break;
    case DType::Float32: store_ids<float>(tokens, out); break;
    case DType::Float64: store_ids<double>(tokens, out); break;
  }
  impl_->bin->write(buf.data(), buf.size());
}

void MegatronWriter::add_item(std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw Error(ErrorKind::Format, "%s: a sequence of %zu tokens exceeds the int32 sizes field", prefix_.c_str(), tokens.size());
  append_tokens(tokens);
  sizes_.push_back(static_cast<int32_t>(tokens.size()));
}

void MegatronWriter::add_item(std::span<const int64_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw Error(ErrorKind::Format, "%s: a sequence of %zu tokens exceeds the int32 sizes field", prefix_.c_str(), tokens.size());
  append_tokens(tokens);
  sizes_.push_back(static_cast<int32_t>(tokens.size()));
}

void MegatronWriter::end_document() { doc_idx_.push_back(static_cast<int64_t>(sizes_.size())); }

void MegatronWriter::add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths) {
  uint64_t sum = 0;
  for (int64_t len : lengths) {
    if (len < 0) throw Error(ErrorKind::Internal, "negative sequence length %ld", (long)len);
    sum += static_cast<uint64_t>(len);
  }
  if (sum != tokens.size())
    throw Error(ErrorKind::Internal, "add_document: lengths sum to %lu but %zu tokens given", (unsigned long)sum, tokens.size());
  append_tokens(tokens);
  for (int64_t len : lengths) sizes_.push_back(static_cast<int32_t>(len));
  end_document();
}

void MegatronWriter::add_index(const MegatronReader& other) {
  if (other.dtype() != dtype_)
    throw Error(ErrorKind::Format, "cannot merge '%s' (dtype %s) into a %s dataset", other.prefix().c_str(),
                dtype_name(static_cast<uint8_t>(other.dtype())), dtype_name(static_cast<uint8_t>(dtype_)));
  const int64_t base = static_cast<int64_t>(sizes_.size());
  for (uint64_t i = 0; i < other.num_sequences(); ++i) sizes_.push_back(other.size(i));
  for (uint64_t k = 1; k < other.num_doc_idx(); ++k) doc_idx_.push_back(base + other.doc_idx(k));
  if (other.bin_bytes() > 0) impl_->bin->write(other.bin_data(), other.bin_bytes());
}

std::string build_idx_bytes(DType dtype, std::span<const int32_t> sizes, std::span<const int64_t> doc_idx) {
  const uint64_t n = sizes.size(), m = doc_idx.size();
  std::string out;
  out.reserve(kIdxHeaderBytes + 12 * n + 8 * m);
  auto put = [&](const void* p, size_t len) { out.append(static_cast<const char*>(p), len); };
  put(kMmidIdxMagic, sizeof kMmidIdxMagic);
  put(&kMmidIdxVersion, 8);
  uint8_t code = static_cast<uint8_t>(dtype);
  put(&code, 1);
  put(&n, 8);
  put(&m, 8);
  put(sizes.data(), 4 * n);
  const int64_t item = static_cast<int64_t>(dtype_size(code));
  int64_t ptr = 0;
  for (uint64_t i = 0; i < n; ++i) {
    put(&ptr, 8);
    ptr += static_cast<int64_t>(sizes[i]) * item;
  }
  put(doc_idx.data(), 8 * m);
  return out;
}

void MegatronWriter::finalize() {
  if (finalized_) throw Error(ErrorKind::Internal, "%s: finalize called twice", prefix_.c_str());
  finalized_ = true;
  OutputFile& idx = *impl_->idx;
  idx.write(build_idx_bytes(dtype_, sizes_, doc_idx_));
  // Both complete on disk before either is renamed (a failure removes both
  // temporaries); then the .bin, then the .idx. A stale index goes first: an
  // interruption between the two renames leaves a .bin without .idx (refused
  // by readers), never a mismatched pair.
  impl_->bin->finish();
  try {
    idx.finish();
  } catch (...) {
    impl_->bin->abandon();
    throw;
  }
  ::unlink(idx_path(prefix_).c_str());
  try {
    impl_->bin->publish();
  } catch (...) {
    idx.abandon();
    throw;
  }
  idx.publish();
}

namespace {
template <typename T>
bool all_in_range(const uint8_t* data, uint64_t n, int64_t limit) {
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
  for (uint64_t i = 0; i < n; ++i) {  // a reduction the compiler vectorises
    const T v = load_unaligned<T>(data + i * sizeof(T));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return n == 0 || (static_cast<int64_t>(lo) >= 0 && static_cast<int64_t>(hi) < limit);
}
}  // namespace

std::optional<TokenIdOutOfRange> find_token_id_out_of_range(const MegatronReader& r, int64_t limit) {
  if (!dtype_is_integer(r.dtype()) || r.num_sequences() == 0) return std::nullopt;
  const uint64_t n = r.total_tokens();
  const uint8_t* data = r.sequence_data(0);
  bool ok = false;
  switch (r.dtype()) {
    case DType::UInt8: ok = limit > 255 || all_in_range<uint8_t>(data, n, limit); break;
    case DType::UInt16: ok = limit > 65535 || all_in_range<uint16_t>(data, n, limit); break;
    case DType::Int8: ok = all_in_range<int8_t>(data, n, limit); break;
    case DType::Int16: ok = all_in_range<int16_t>(data, n, limit); break;
    case DType::Int32: ok = all_in_range<int32_t>(data, n, limit); break;
    case DType::Int64: ok = all_in_range<int64_t>(data, n, limit); break;
    default: return std::nullopt;
  }
  if (ok) return std::nullopt;
  uint64_t doc = 0;
  for (uint64_t i = 0; i < r.num_sequences(); ++i) {
    while (doc + 1 < r.num_doc_idx() && static_cast<uint64_t>(r.doc_idx(doc + 1)) <= i) ++doc;
    for (int64_t id : r.sequence_tokens(i))
      if (id < 0 || id >= limit) return TokenIdOutOfRange{doc, i, id};
  }
  return std::nullopt;  // the tokens outside every sequence (none in a valid file)
}

}  // namespace zlm::formats
