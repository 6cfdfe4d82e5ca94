#include "common/tokenizer/gpt2_bpe.h"

#include <simdjson.h>
#define XXH_INLINE_ALL  // header-only xxHash: XXH3 inlined into the hot loop
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <queue>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_pretokenizer.h"
#include "common/core/mapped_file.h"
#include "common/core/output_file.h"
#include "common/core/utf8.h"

namespace zlm {

// ---- byte <-> code point table (§3.2) ------------------------------------------

namespace {
struct ByteTable {
  uint32_t to_cp[256];
  int from_cp[512];
  ByteTable() {
    std::fill(std::begin(from_cp), std::end(from_cp), -1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++);
      from_cp[to_cp[b]] = b;
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}
}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t b) { return byte_table().to_cp[b]; }
int gpt2_codepoint_to_byte(uint32_t cp) { return cp < 512 ? byte_table().from_cp[cp] : -1; }

// ---- cache ---------------------------------------------------------------------

uint64_t BpeCache::hash(std::string_view s) {
  const uint64_t h = XXH3_64bits(s.data(), s.size());
  return h ? h : 1;  // 0 marks an empty slot
}

namespace {
constexpr size_t kCacheFirstSlots = 1 << 16;  // 2 MiB: the distinct pieces of ~5 MB of web text
}  // namespace

BpeCache::BpeCache(size_t max_entries, size_t seed_after)
    : max_entries_(max_entries), memory_(kCacheFirstSlots * sizeof(Slot)), slots_(static_cast<Slot*>(memory_.data())),
      mask_(kCacheFirstSlots - 1), seed_after_(seed_after) {}

void BpeCache::clear() {
  memory_.clear();
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

void BpeCache::reset() {
  clear();
  seeded_.reset();
  served_ = 0;
}

bool BpeCache::find(std::string_view piece, uint64_t h, std::vector<int32_t>& out) const {
  const size_t mask = mask_;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return false;
    if (s.hash != h || s.key_len != piece.size()) continue;
    const char* key = s.key;
    if (s.key_len > kInlineKey) {
      uint32_t offset;
      std::memcpy(&offset, s.key, sizeof offset);
      key = keys_.data() + offset;
    }
    if (std::memcmp(key, piece.data(), piece.size()) != 0) continue;
    if (s.ids_len == 1) out.push_back(static_cast<int32_t>(s.ids));
    else out.insert(out.end(), ids_.data() + s.ids, ids_.data() + s.ids + s.ids_len);
    return true;
  }
}

void BpeCache::grow() {
  ZeroedPages bigger((mask_ + 1) * 2 * sizeof(Slot));
  auto* slots = static_cast<Slot*>(bigger.data());
  const size_t mask = (mask_ + 1) * 2 - 1;
  for (size_t k = 0; k <= mask_; ++k) {
    const Slot& s = slots_[k];
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots[i].hash != 0) i = (i + 1) & mask;
    slots[i] = s;
  }
  memory_ = std::move(bigger);
  slots_ = slots;
  mask_ = mask;
}

void BpeCache::insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n) {
  if (piece.size() > UINT8_MAX || n > UINT8_MAX || n == 0) return;
  if (size_ >= max_entries_ || keys_.size() + piece.size() > UINT32_MAX || ids_.size() + n > UINT32_MAX) clear();
  if ((size_ + 1) * 2 > mask_ + 1) grow();
  const size_t mask = mask_;
  size_t i = h & mask;
  while (slots_[i].hash != 0) i = (i + 1) & mask;
  Slot& s = slots_[i];
  s = Slot{};
  s.hash = h;
  s.key_len = static_cast<uint8_t>(piece.size());
  s.ids_len = static_cast<uint8_t>(n);
  if (piece.size() <= kInlineKey) {
    std::memcpy(s.key, piece.data(), piece.size());
  } else {
    const auto offset = static_cast<uint32_t>(keys_.size());
    std::memcpy(s.key, &offset, sizeof offset);
    keys_.insert(keys_.end(), piece.begin(), piece.end());
  }
  if (n == 1) {
    s.ids = static_cast<uint32_t>(ids[0]);
  } else {
    s.ids = static_cast<uint32_t>(ids_.size());
    ids_.insert(ids_.end(), ids, ids + n);
  }
  ++size_;
}

// ---- model ---------------------------------------------------------------------

namespace {
constexpr size_t kShortPiece = 64;  // pieces up to this many bytes: plain loop + cache
constexpr size_t kWholeTokenMax = 16;  // tokens up to this many bytes are looked up whole (ShortTokens)

// A merge in the pair table, 8 bytes so that GPT-2's table (131,072 slots) takes 1 MiB and
// stays in L2: the pair's symbols (20 bits each) and its rank (24 bits); the merge's result
// is looked up by rank only when the pair is merged. All ones: an empty slot.
constexpr int kSymbolBits = 20, kRankBits = 24;
constexpr uint64_t kNoPair = ~0ULL;
constexpr int32_t kMaxSymbols = (1 << kSymbolBits) - 1;  // ids below this (all ones is the empty slot's)
constexpr int64_t kMaxMerges = int64_t{1} << kRankBits;
struct PairEntry {
  uint64_t packed = kNoPair;
  uint64_t key() const { return packed >> kRankBits; }
  int32_t rank() const { return static_cast<int32_t>(packed & ((uint64_t{1} << kRankBits) - 1)); }
};

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << kSymbolBits) | static_cast<uint32_t>(b); }
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}
}  // namespace

// The single bytes and the whole tokens of up to 16 bytes (Impl::whole), looked up with one
// memory access: each slot holds the token's bytes, its length and its id. A string of n bytes
// is keyed by its bytes as little-endian words, zero past the n-th: eight bytes from the string
// loaded whole and masked, so the key costs no branch on n; with n in the slot that key is one
// string's alone. The loads read up to 16 bytes from the string's start, which find() needs to be
// readable (find_copy() copies the string first). Strings of up to 8 bytes (78% of GPT-2's
// tokens) sit in 16-byte slots, longer ones in 24-byte slots; linear probing, two thirds full or less.
class ShortTokens {
 public:
  ShortTokens() = default;
  ShortTokens(const ShortTokens&) = delete;  // the view may point into the own tables
  ShortTokens& operator=(const ShortTokens&) = delete;
  // `len`: the string's length in its low 8 bits (0: an empty slot). In a BpeCache's copy
  // (Seeded) the bits above hold a second id + 1 for a piece that is two tokens; a model's
  // tables never do.
  struct Small {
    uint64_t key = 0;
    int32_t id = -1;
    uint32_t len = 0;
  };
  struct Large {
    uint64_t k0 = 0, k1 = 0;
    int32_t id = -1;
    uint32_t len = 0;
  };
  static constexpr int kLenBits = 8;
  void build(const std::vector<std::pair<std::string_view, int32_t>>& tokens) {
    size_t n8 = 0;
    for (const auto& t : tokens) n8 += t.first.size() <= 8;
    small_own_.assign(capacity(n8), Small{});
    large_own_.assign(capacity(tokens.size() - n8), Large{});
    small_ = small_own_.data(), small_mask_ = small_own_.size() - 1, large_ = large_own_.data(), large_mask_ = large_own_.size() - 1;
    small_used_ = large_used_ = 0;
    for (const auto& [b, id] : tokens) {  // sized to two thirds or less: add() does not grow them
      char padded[kWholeTokenMax] = {};
      std::memcpy(padded, b.data(), b.size());
      add(padded, b.size(), id);
    }
  }
  // Looks up in tables built elsewhere (the saved model's, mapped); false unless both sizes are
  // powers of two.
  bool view(const Small* small, size_t n_small, const Large* large, size_t n_large, int32_t id_limit) {
    if (!std::has_single_bit(n_small) || !std::has_single_bit(n_large) || id_limit <= 0) return false;
    // find() stops at an empty slot and encode_piece emits the ids: a table from a file must
    // have one, and only ids below the vocabulary's size.
    // Without a branch per entry: this pass reads the whole table once per process.
    auto fits = [&](const auto* t, size_t n) {
      bool empty = false, bad = false;
      for (size_t i = 0; i < n; ++i) {
        const bool used = t[i].len != 0;
        empty |= !used;
        bad |= used & ((static_cast<uint32_t>(t[i].id) >= static_cast<uint32_t>(id_limit)) | (t[i].len - 1 > kWholeTokenMax - 1));
      }
      return empty && !bad;
    };
    if (!fits(small, n_small) || !fits(large, n_large)) return false;
    small_ = small, small_mask_ = n_small - 1, large_ = large, large_mask_ = n_large - 1;
    return true;
  }
  // The small table read from `copy` from now on, which holds the same bytes (Impl::place_hot_tables).
  void read_small_from(const Small* copy) { small_ = copy; }
  const Small* small() const { return small_; }
  size_t small_size() const { return small_mask_ + 1; }
  const Large* large() const { return large_; }
  size_t large_size() const { return large_mask_ + 1; }
  // The id of the token spelled by the n bytes at p (1 to kWholeTokenMax), -1 when it is none;
  // p[0..15] must be readable.
  int32_t find(const char* p, size_t n) const { return static_cast<int32_t>(find_two(key(p, n))); }
  // find() for a string whose 16 bytes from its start may not all be readable.
  int32_t find_copy(const char* p, size_t n) const {
    char padded[kWholeTokenMax] = {};
    std::memcpy(padded, p, n);
    return find(padded, n);
  }
  // A lookup in two halves, for a batch of strings whose home slots are all requested before
  // the first is read (Impl::encode_batches): the key, then the probe. The key's hash is not yet
  // reduced to a slot, so it stays good when the table grows or is seeded again in between.
  struct Key {
    uint64_t k0, k1;  // the bytes as little-endian words, zero past n (k1 0 up to 8 bytes)
    uint32_t hash, n;
  };
  static Key key(const char* p, size_t n) {  // p[0..15] readable, n in 1..kWholeTokenMax
    if (n <= 8) {
      const uint64_t k = small_key(p, n);
      return {k, 0, hash(k, n), static_cast<uint32_t>(n)};
    }
    const auto [k0, k1] = large_key(p, n);
    return {k0, k1, hash(mix16(k0, k1), n), static_cast<uint32_t>(n)};
  }
  // The address of the key's home slot, whose line a caller may request ahead of the probe.
  const void* home_slot(const Key& k) const {
    return k.n <= 8 ? static_cast<const void*>(small_ + (k.hash & small_mask_)) : static_cast<const void*>(large_ + (k.hash & large_mask_));
  }
  // The slot's `len` in the high 32 bits (with a second id in a BpeCache's copy) and its id in
  // the low ones; the id -1 (and `len` 0) when the string is absent.
  uint64_t find_two(const Key& key) const {
    auto hit = [](const auto& s) { return uint64_t{s.len} << 32 | static_cast<uint32_t>(s.id); };
    if (key.n <= 8) {
      for (size_t i = key.hash & small_mask_;; i = (i + 1) & small_mask_) {
        const Small& s = small_[i];
        if (s.key == key.k0 && length(s.len) == key.n) return hit(s);
        if (s.len == 0) return uint32_t{0xFFFFFFFF};
      }
    }
    for (size_t i = key.hash & large_mask_;; i = (i + 1) & large_mask_) {
      const Large& s = large_[i];
      if (s.k0 == key.k0 && s.k1 == key.k1 && length(s.len) == key.n) return hit(s);
      if (s.len == 0) return uint32_t{0xFFFFFFFF};
    }
  }
  // A writable copy of `model`'s entries (BpeCache::Seeded), in tables with room for
  // `extra_small` more strings of up to 8 bytes and `extra_large` longer ones. The entries are
  // put back in the order of their slots: in a table 2^k times the size a slot's home is its
  // home in the model's plus a multiple of the model's size, so the copy writes the new table in
  // 2^k sequential runs (and tokens that collide keep their order, the most frequent first as
  // build() put them).
  void seed_from(const ShortTokens& model, size_t extra_small, size_t extra_large) {
    seed_table(model.small_, model.small_size(), extra_small, small_own_, small_, small_mask_, small_used_);
    seed_table(model.large_, model.large_size(), extra_large, large_own_, large_, large_mask_, large_used_);
  }
  // Adds the string of n bytes at `padded` (16 bytes readable, zero past n) with `value`; the
  // string must not be in the tables yet. Doubles a table past two thirds full.
  // `second`: a second id + 1 in the slot (find_two), 0 for none.
  void add(const char* padded, size_t n, int32_t value, uint32_t second = 0) {
    const auto len = static_cast<uint32_t>(n) | second << kLenBits;
    const Key k = key(padded, n);
    if (n <= 8) {
      if ((small_used_ + 1) * 3 > small_own_.size() * 2) grow(small_own_, small_, small_mask_);
      put(Small{k.k0, value, len});
    } else {
      if ((large_used_ + 1) * 3 > large_own_.size() * 2) grow(large_own_, large_, large_mask_);
      put(Large{k.k0, k.k1, value, len});
    }
  }

 private:
  static uint64_t load8(const char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
  // The mask of a word's first n bytes, n in 1..8.
  static uint64_t low_bytes(size_t n) { return ~uint64_t{0} >> (64 - 8 * n); }
  // The key of the n bytes at p (p[0..15] readable), as build() stores it and find() looks for
  // it: the bytes as little-endian words, zero past the n-th; one word up to 8 bytes (n in 1..8),
  // two past that (n in 9..16).
  static uint64_t small_key(const char* p, size_t n) { return load8(p) & low_bytes(n); }
  static std::pair<uint64_t, uint64_t> large_key(const char* p, size_t n) { return {load8(p), load8(p + 8) & low_bytes(n - 8)}; }
  static size_t capacity(size_t n) {  // at most about two thirds full: GPT-2's 39,589 strings of up to 8 bytes take 1 MiB
    size_t cap = 16;
    while (cap * 2 < n * 3) cap <<= 1;
    return cap;
  }
  static uint64_t mix16(uint64_t k0, uint64_t k1) { return k0 ^ (k1 * 0x9E3779B97F4A7C15ULL); }
  static uint32_t hash(uint64_t k, size_t n) { return static_cast<uint32_t>((k + n) * 0xff51afd7ed558ccdULL >> 32); }
  static size_t home(uint64_t k, size_t n, size_t mask) { return hash(k, n) & mask; }
  static size_t length(uint32_t len) { return len & ((1u << kLenBits) - 1); }
  static size_t home_of(const Small& s, size_t mask) { return home(s.key, length(s.len), mask); }
  static size_t home_of(const Large& s, size_t mask) { return home(mix16(s.k0, s.k1), length(s.len), mask); }
  // Writes an entry into the own tables at its probe's first empty slot.
  void put(const Small& e) { ++small_used_, put_into(small_own_.data(), small_mask_, e); }
  void put(const Large& e) { ++large_used_, put_into(large_own_.data(), large_mask_, e); }
  template <typename Slot>
  static void put_into(Slot* t, size_t mask, const Slot& e) {
    size_t i = home_of(e, mask);
    while (t[i].len != 0) i = (i + 1) & mask;
    t[i] = e;
  }
  template <typename Slot>
  static void seed_table(const Slot* from, size_t n, size_t extra, std::vector<Slot>& own, const Slot*& view, size_t& mask, size_t& used) {
    used = 0;
    for (size_t i = 0; i < n; ++i) used += from[i].len != 0;
    own = rehashed(from, n, capacity(used + extra));
    view = own.data(), mask = own.size() - 1;
  }
  template <typename Slot>
  static void grow(std::vector<Slot>& own, const Slot*& view, size_t& mask) {
    own = rehashed(own.data(), own.size(), own.size() * 2);
    view = own.data(), mask = own.size() - 1;
  }
  // The n slots at `from` in a new table of `cap` slots (a power of two), in the order of their slots.
  template <typename Slot>
  static std::vector<Slot> rehashed(const Slot* from, size_t n, size_t cap) {
    std::vector<Slot> to(cap);
    for (size_t i = 0; i < n; ++i)
      if (from[i].len != 0) put_into(to.data(), cap - 1, from[i]);
    return to;
  }
  std::vector<Small> small_own_;
  std::vector<Large> large_own_;
  const Small* small_ = nullptr;
  const Large* large_ = nullptr;
  size_t small_mask_ = 0, large_mask_ = 0;
  size_t small_used_ = 0, large_used_ = 0;  // entries in the own tables (seed_from, add)
};

// A long-lived cache's table (BpeCache's comment): the model's whole tokens and the pieces of up
// to 16 bytes met since, in one ShortTokens. A value is an id (with a second one in the slot's
// `len` for a piece of two tokens: 73% of the pieces of several ids in OpenWebText), or for a
// piece of three or more ids -2 - their offset in `multi`, which holds their count and then the ids.
struct BpeCache::Seeded {
  ShortTokens table;
  std::vector<int32_t> multi;
  size_t added = 0;  // pieces added since the table was seeded
  void seed(const ShortTokens& model, size_t extra_small, size_t extra_large) {
    table.seed_from(model, extra_small, extra_large);
    multi.clear();
    added = 0;
  }
  // A piece that is not in the table yet (p[0..n) readable, n <= kWholeTokenMax).
  void add(const char* p, size_t n, const int32_t* ids, size_t count) {
    char padded[kWholeTokenMax] = {};
    std::memcpy(padded, p, n);
    int32_t value = ids[0];
    uint32_t second = 0;
    static_assert(kMaxSymbols < (1 << (32 - ShortTokens::kLenBits)) - 1, "a second id + 1 fits above the length");
    if (count == 2) {
      second = static_cast<uint32_t>(ids[1]) + 1;  // in the slot: no second lookup
    } else if (count > 1) {
      value = -2 - static_cast<int32_t>(multi.size());
      multi.push_back(static_cast<int32_t>(count));
      multi.insert(multi.end(), ids, ids + count);
    }
    table.add(padded, n, value, second);
    ++added;
  }
};

void BpeCache::SeededDeleter::operator()(Seeded* s) const { delete s; }

struct Gpt2Bpe::Impl {
  // symbol id -> bytes: symbol_bytes[symbol_start[id], symbol_start[id + 1]) (one arena: saving and
  // reading the model back copy two arrays instead of making 50,000 strings).
  std::string symbol_bytes;
  std::vector<uint32_t> symbol_start{0};
  size_t num_symbols() const { return symbol_start.size() - 1; }
  std::string_view symbol(size_t id) const {
    return std::string_view(symbol_bytes).substr(symbol_start[id], symbol_start[id + 1] - symbol_start[id]);
  }
  void push_symbol(std::string_view bytes) {
    symbol_bytes.append(bytes);
    symbol_start.push_back(static_cast<uint32_t>(symbol_bytes.size()));
  }
  // bytes -> symbol id: open addressing over the symbols (XXH3 of the bytes, linear probing; -1 empty).
  // Loading does ~150k lookups (three per merge): a node-based map spent half the load time there.
  std::vector<int32_t> id_slots;
  uint64_t id_mask = 0;
  size_t ids_used = 0;
  // Tokens of a vocabulary that gives one id to several strings: all but the last string of
  // that id (symbol(id) is the last, as Megatron's decoder does; its encoder maps each).
  std::unordered_map<std::string, int32_t> aliases;
  int32_t vocab_limit = 0;                    // symbol ids >= this are not in the vocab
  size_t vocab_entries = 0;
  int32_t byte_symbol[256];
  std::vector<PairEntry> pairs;               // open addressing, power-of-two size
  uint64_t pair_mask = 0;
  std::vector<int32_t> result_of;             // merge rank -> the symbol it makes (-1: a malformed line)
  // What encoding reads: `pairs` and `result_of` of a model built here, or the same tables of
  // a saved model in place (its mapped file, kept in `saved_file`; load_saved).
  const PairEntry* pair_table = nullptr;
  const int32_t* result_table = nullptr;
  MappedFile saved_file;
  ZeroedPages hot_pages;  // where place_hot_tables() put the tables that encoding reads
  size_t merges = 0;
  int32_t eod = -1;
  bool well_formed = true;
  // Per symbol: 1 when it is a vocabulary token whose own bytes BPE merges back into it alone.
  // A piece with those bytes then encodes as that one id without merging (tiktoken looks a piece
  // up in its vocabulary first too). For GPT-2's files every token is one; the flag keeps the
  // result BPE's for files where some are not.
  // Only tokens of 2 to kWholeTokenMax bytes are marked (longer ones are rare in text, and
  // merging gives them the same result). Built at load from the files only: the saved model
  // keeps the tables made from it (short_tokens).
  std::vector<uint8_t> whole;
  ShortTokens short_tokens;  // the marked tokens, for encode_piece (built from `whole`, saved with the model)
  // Tells models apart for a BpeCache, which holds one model's pieces at a time (own_cache).
  const uint64_t serial = next_serial();
  static uint64_t next_serial() {
    static std::atomic<uint64_t> last{0};
    return ++last;
  }
  // `cache`, emptied first when it holds another model's pieces.
  BpeCache* own_cache(BpeCache* cache) const {
    if (cache && cache->model_ != serial) cache->reset(), cache->model_ = serial;
    return cache;
  }
  void mark_whole_tokens();
  void index_whole_tokens();
  void place_hot_tables();
  // Megatron's merge loop over a piece's bytes (their byte symbols).
  void bpe_bytes(std::string_view piece, std::vector<int32_t>& out) const;

  // The slot of `bytes`: its id's, or the empty one where it would go.
  size_t id_slot(std::string_view bytes) const {
    for (uint64_t i = XXH3_64bits(bytes.data(), bytes.size()) & id_mask;; i = (i + 1) & id_mask) {
      const int32_t id = id_slots[i];
      if (id < 0 || symbol(static_cast<size_t>(id)) == bytes) return i;
    }
  }
  void reserve_ids(size_t n) {
    size_t cap = 1024;
    while (cap < 2 * n) cap <<= 1;
    if (cap <= id_slots.size()) return;
    std::vector<int32_t> old = std::move(id_slots);
    id_slots.assign(cap, -1);
    id_mask = cap - 1;
    for (int32_t id : old)
      if (id >= 0) id_slots[id_slot(symbol(static_cast<size_t>(id)))] = id;
  }
  // Registers symbol `id` under its bytes unless they have an id already (the first wins).
  void add_id(int32_t id) {
    if (2 * (ids_used + 1) > id_slots.size()) reserve_ids(ids_used + 1);
    const size_t slot = id_slot(symbol(static_cast<size_t>(id)));
    if (id_slots[slot] >= 0) return;
    id_slots[slot] = id;
    ++ids_used;
  }
  int32_t intern(std::string_view bytes) {
    if (!aliases.empty()) {
      auto it = aliases.find(std::string(bytes));
      if (it != aliases.end()) return it->second;
    }
    if (2 * (ids_used + 1) > id_slots.size()) reserve_ids(ids_used + 1);
    const size_t slot = id_slot(bytes);
    if (id_slots[slot] >= 0) return id_slots[slot];
    auto id = static_cast<int32_t>(num_symbols());
    push_symbol(bytes);
    id_slots[slot] = id;
    ++ids_used;
    return id;
  }
  // Where the pair (a, b)'s probe starts.
  uint64_t pair_home(uint64_t key) const { return mix(key) & pair_mask; }
  // The rank of the merge of (a, b), or INT32_MAX when there is none.
  int32_t pair_rank(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (uint64_t i = pair_home(key);; i = (i + 1) & pair_mask) {
      const PairEntry e = pair_table[i];
      if (e.key() == key) return e.rank();
      if (e.packed == kNoPair) return INT32_MAX;
    }
  }
  void put_pair(int32_t a, int32_t b, int32_t rank) {
    const uint64_t key = pair_key(a, b);
    for (uint64_t i = pair_home(key);; i = (i + 1) & pair_mask) {
      PairEntry& e = pairs[i];
      if (e.packed == kNoPair || e.key() == key) {
        e.packed = (key << kRankBits) | static_cast<uint64_t>(rank);  // a repeated pair keeps its last rank (Python dict semantics)
        return;
      }
    }
  }
  int32_t out_id(int32_t symbol) const { return symbol < vocab_limit ? symbol : 0; }

  // Loading (Gpt2Bpe::load): the vocabulary, the merges, their index, the well-formedness check.
  struct Merge {
    int32_t a, b, result;  // -1: a malformed line (keeps later ranks aligned; never matches)
  };
  void load_vocab(std::string_view text, const std::string& vocab_path);
  std::vector<Merge> read_merges(std::string_view text, const std::string& merges_path, const std::string& vocab_path);
  // The loaded model as bytes, and back (false: not a model of this format; see Gpt2Bpe::load).
  std::string serialize() const;
  bool deserialize(std::string_view bytes);
  bool load_saved(const std::string& path, uint64_t key);
  void save(const std::string& path, uint64_t key) const;
  void index_merges(const std::vector<Merge>& merges, const std::string& merges_path);

  void bpe_short(const int32_t* init, size_t n, std::vector<int32_t>& out) const;
  void bpe_leftmost(const int32_t* init, size_t n, std::vector<int32_t>& out) const;
  void bpe_heap(const int32_t* init, size_t n, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, const char* readable, std::vector<int32_t>& out, BpeCache* cache) const;
  // A piece that is no whole token: its ids from `cache` or by merging (and then into `cache`).
  void encode_rare(std::string_view piece, std::vector<int32_t>& out, BpeCache* cache) const;
  // The pieces of `text` a batch at a time (encode_batches' comment in gpt2_bpe.cpp).
  template <typename OnMiss>
  void encode_batches(std::string_view text, const ShortTokens& table, const std::vector<int32_t>* multi, std::vector<int32_t>& out,
                      BpeCache* cache, OnMiss&& on_miss) const;
  // The piece's ids by merging its bytes (bpe_leftmost, bpe_heap or bpe_short).
  void merge(std::string_view piece, std::vector<int32_t>& out) const;
  // Seeds `cache` (BpeCache's comment): a copy of the whole tokens, and the pieces of up to 16
  // bytes that the cache holds.
  void seed(BpeCache& cache) const;
  // encode() through a seeded cache.
  void encode_seeded(std::string_view text, std::vector<int32_t>& out, BpeCache& cache) const;
};

static std::string vocab_key_to_bytes(std::string_view key) {
  std::string out;
  size_t i = 0;
  while (i < key.size()) {
    uint32_t cp = 0;
    size_t len = utf8_decode(key.substr(i), &cp);
    if (len == 0) len = 1, cp = 0xFFFFFFFF;
    int b = cp == 0xFFFFFFFF ? -1 : gpt2_codepoint_to_byte(cp);
    if (b >= 0) out.push_back(static_cast<char>(b));
    else out.append(key.substr(i, len));  // not a byte-level character: keep as is
    i += len;
  }
  return out;
}

Gpt2Bpe::Gpt2Bpe() : impl_(std::make_unique<Impl>()) {}
Gpt2Bpe::Gpt2Bpe(Gpt2Bpe&&) noexcept = default;
Gpt2Bpe& Gpt2Bpe::operator=(Gpt2Bpe&&) noexcept = default;
Gpt2Bpe::~Gpt2Bpe() = default;

// vocab.json: {"token": id, ...}; symbols by id, and the 256 byte symbols.
void Gpt2Bpe::Impl::load_vocab(std::string_view text, const std::string& vocab_path) {
  simdjson::dom::parser parser;
  const simdjson::padded_string json(text);
  simdjson::dom::object obj;
  if (auto err = parser.parse(json).get_object().get(obj))
    throw Error(ErrorKind::Format, "%s: not a JSON object of token -> id: %s", vocab_path.c_str(), simdjson::error_message(err));
  int64_t max_id = -1;
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(obj.size());
  for (auto field : obj) {
    int64_t id;
    if (field.value.get_int64().get(id) || id < 0 || id > INT32_MAX / 2)
      throw Error(ErrorKind::Format, "%s: token '%.*s' has no valid integer id", vocab_path.c_str(),
                  static_cast<int>(field.key.size()), field.key.data());
    entries.emplace_back(vocab_key_to_bytes(field.key), id);
    max_id = std::max(max_id, id);
    if (field.key == "<|endoftext|>") eod = static_cast<int32_t>(id);
  }
  if (entries.empty()) throw Error(ErrorKind::Format, "%s: the vocabulary is empty", vocab_path.c_str());
  vocab_entries = entries.size();
  vocab_limit = static_cast<int32_t>(max_id + 1);
  std::vector<const std::string*> by_id(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [bytes, id] : entries) by_id[static_cast<size_t>(id)] = &bytes;  // the last string of an id
  for (const std::string* bytes : by_id) push_symbol(bytes ? *bytes : std::string_view());
  reserve_ids(entries.size() + 1024);
  for (const auto& [bytes, id] : entries) {  // in file order: the first id of a string wins
    if (aliases.count(bytes) || id_slots[id_slot(bytes)] >= 0) continue;
    if (symbol(static_cast<size_t>(id)) == bytes) {
      add_id(static_cast<int32_t>(id));
    } else {
      aliases.emplace(bytes, static_cast<int32_t>(id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_symbol[b] = intern(std::string_view(&byte, 1));
  }
}

namespace {

// merges.txt split on '\n' (the first and the last element are not merges: Megatron drops them).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.emplace_back(text.data() + start, text.size() - start);
      return lines;
    }
    lines.emplace_back(text.data() + start, nl - start);
    start = nl + 1;
  }
}

// Python's str.split(): the whitespace-separated words of a line.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> parts;
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && ws(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && !ws(line[j])) ++j;
    if (j > i) parts.push_back(line.substr(i, j - i));
    i = j;
  }
  return parts;
}

}  // namespace

// The merges in rank order. Every symbol a merge uses or makes must have an id
// (the reference tokenizer fails with a KeyError when it meets one; here it
// would become id 0), and every byte must have a token.
std::vector<Gpt2Bpe::Impl::Merge> Gpt2Bpe::Impl::read_merges(std::string_view text, const std::string& merges_path,
                                                            const std::string& vocab_path) {
  const std::vector<std::string_view> lines = split_lines(text);
  std::vector<Merge> out;
  out.reserve(lines.size());
  std::string joined;
  for (size_t k = 1; k + 1 < lines.size(); ++k) {
    const std::vector<std::string_view> parts = words(lines[k]);
    if (parts.size() != 2) {
      out.push_back({-1, -1, -1});
      continue;
    }
    const std::string a = vocab_key_to_bytes(parts[0]), b = vocab_key_to_bytes(parts[1]);
    joined.assign(a).append(b);
    const int32_t ia = intern(a), ib = intern(b), ir = intern(joined);
    for (auto [id, what] : {std::pair{ia, parts[0]}, std::pair{ib, parts[1]}})
      if (id >= vocab_limit)
        throw Error(ErrorKind::Format, "%s: line %zu: '%.*s' is not in %s ---> HINT: the merges file does not belong to this vocabulary",
                    merges_path.c_str(), k + 1, static_cast<int>(what.size()), what.data(), vocab_path.c_str());
    if (ir >= vocab_limit)
      throw Error(ErrorKind::Format, "%s: line %zu: '%.*s %.*s' makes a token that is not in %s ---> HINT: the merges file does not belong to "
                  "this vocabulary", merges_path.c_str(), k + 1, static_cast<int>(parts[0].size()), parts[0].data(),
                  static_cast<int>(parts[1].size()), parts[1].data(), vocab_path.c_str());
    out.push_back({ia, ib, ir});
  }
  for (int b = 0; b < 256; ++b)  // any text may need any byte
    if (byte_symbol[b] >= vocab_limit)
      throw Error(ErrorKind::Format, "%s: the byte 0x%02x has no token (a GPT-2 vocabulary has all 256)", vocab_path.c_str(), b);
  return out;
}

// The pair table by rank, and whether the merges are well formed: every symbol
// is produced only by merges ranked below every merge that uses it.
void Gpt2Bpe::Impl::index_merges(const std::vector<Merge>& all, const std::string& merges_path) {
  merges = all.size();
  if (num_symbols() >= static_cast<size_t>(kMaxSymbols) || static_cast<int64_t>(merges) >= kMaxMerges)
    throw Error(ErrorKind::Format, "%s: %zu merges making %zu symbols; the tokenizer takes at most %ld merges and %d symbols", merges_path.c_str(),
                merges, num_symbols(), (long)kMaxMerges - 1, kMaxSymbols - 1);
  size_t cap = 16;
  while (cap < all.size() * 2 + 16) cap <<= 1;
  pairs.assign(cap, PairEntry{});
  pair_mask = cap - 1;
  result_of.assign(all.size(), -1);
  pair_table = pairs.data(), result_table = result_of.data();
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].a >= 0) put_pair(all[r].a, all[r].b, static_cast<int32_t>(r)), result_of[r] = all[r].result;
  std::vector<int64_t> max_create(num_symbols(), -1), min_use(num_symbols(), INT64_MAX);
  for (size_t r = 0; r < all.size(); ++r) {
    const Merge& mg = all[r];
    if (mg.a < 0) continue;
    if (pair_rank(mg.a, mg.b) != static_cast<int32_t>(r)) continue;  // superseded duplicate
    max_create[mg.result] = std::max<int64_t>(max_create[mg.result], static_cast<int64_t>(r));
    min_use[mg.a] = std::min<int64_t>(min_use[mg.a], static_cast<int64_t>(r));
    min_use[mg.b] = std::min<int64_t>(min_use[mg.b], static_cast<int64_t>(r));
  }
  for (size_t sym = 0; sym < num_symbols(); ++sym)
    if (max_create[sym] >= 0 && min_use[sym] != INT64_MAX && max_create[sym] > min_use[sym]) well_formed = false;
}

// ---- the saved model -------------------------------------------------------------
// Parsing vocab.json and merges.txt and indexing the merges takes ~17 ms, most of a
// short run's start (preprocess_data of a few MB). The parsed model is saved as
// bytes under the cache directory, named by a hash of both files' bytes, headed by
// this format's name and version, and later loads of the same files read it back. A saved model that
// does not read back whole (truncated, another build's, a payload whose checksum
// differs) is rebuilt from the files and saved again; a cache directory that cannot
// be written only costs the time. Its arrays start at multiples of 8 bytes, and the ones
// encoding reads (the pair table, the merge results, the whole-token tables: ~2.8 MB for GPT-2)
// are used in place in the mapped file, not copied: copying and rebuilding them took half a
// short run's start-up, most of it first touches of fresh memory. The file is only ever
// replaced by a rename (write_file_atomic), so the mapping a process reads stays whole.
namespace {

// The format's name and version: change it with the layout below (serialize), so that a model
// saved by another build is parsed again rather than misread.
constexpr char kModelMagic[8] = {'Z', 'L', 'M', 'B', 'P', 'E', '0', '8'};

struct Writer {
  std::string out;
  template <class T>
  void put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  // Its length, then the values from an offset that is a multiple of 8 (the payload starts at
  // one in the file, so a mapped model's arrays are aligned in place: Reader::view).
  template <class T>
  void put_array(const T* v, size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 8);
    put(static_cast<uint64_t>(n));
    out.append((8 - out.size() % 8) % 8, '\0');
    out.append(reinterpret_cast<const char*>(v), n * sizeof(T));
  }
  template <class C>  // std::vector of trivially copyable values, or std::string
  void put_vector(const C& v) {
    put_array(v.data(), v.size());
  }
  void put_bytes(std::string_view b) {
    put(static_cast<uint32_t>(b.size()));
    out.append(b);
  }
};

struct Reader {
  std::string_view in;
  const char* start = in.data();  // where offsets (the arrays' alignment) count from
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (in.size() < sizeof(T)) return ok = false, v;
    std::memcpy(&v, in.data(), sizeof(T));
    in.remove_prefix(sizeof(T));
    return v;
  }
  size_t consumed() const { return static_cast<size_t>(in.data() - start); }
  // An array written by Writer::put_array, in place (nullptr and ok = false when it is not whole
  // or not aligned for T).
  template <class T>
  const T* view(size_t& n) {
    n = get<uint64_t>();
    const size_t pad = (8 - consumed() % 8) % 8;
    if (!ok || pad > in.size() || n > (in.size() - pad) / sizeof(T)) return ok = false, nullptr;
    in.remove_prefix(pad);
    const T* p = reinterpret_cast<const T*>(in.data());
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) return ok = false, nullptr;
    in.remove_prefix(n * sizeof(T));
    return p;
  }
  template <class C>
  void get_vector(C& v) {
    size_t n = 0;
    const auto* p = view<typename C::value_type>(n);
    if (ok) v.assign(p, p + n);
  }
  std::string_view get_bytes() {
    const auto n = get<uint32_t>();
    if (!ok || n > in.size()) return ok = false, std::string_view();
    std::string_view b = in.substr(0, n);
    in.remove_prefix(n);
    return b;
  }
};

std::string model_cache_dir() {
  if (const char* dir = std::getenv("ZLM_CACHE_DIR")) return dir;  // empty: no saved models
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/zerolm";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/zerolm";
  return "";
}

}  // namespace

std::string Gpt2Bpe::Impl::serialize() const {
  Writer w;
  w.put(vocab_limit), w.put(static_cast<uint64_t>(vocab_entries)), w.put(static_cast<uint64_t>(merges)), w.put(eod);
  w.put(static_cast<uint8_t>(well_formed)), w.put(pair_mask);
  w.put(byte_symbol);
  w.put_vector(symbol_bytes);
  w.put_vector(symbol_start);
  w.put(static_cast<uint64_t>(aliases.size()));
  for (const auto& [bytes, id] : aliases) w.put_bytes(bytes), w.put(id);
  w.put_vector(pairs);
  w.put_vector(result_of);
  w.put_array(short_tokens.small(), short_tokens.small_size());
  w.put_array(short_tokens.large(), short_tokens.large_size());
  return std::move(w.out);
}

bool Gpt2Bpe::Impl::deserialize(std::string_view bytes) {
  Reader r{bytes};
  vocab_limit = r.get<int32_t>(), vocab_entries = r.get<uint64_t>(), merges = r.get<uint64_t>(), eod = r.get<int32_t>();
  well_formed = r.get<uint8_t>() != 0, pair_mask = r.get<uint64_t>();
  for (int32_t& b : byte_symbol) b = r.get<int32_t>();
  r.get_vector(symbol_bytes);
  r.get_vector(symbol_start);
  if (!r.ok || symbol_start.empty() || symbol_start.back() != symbol_bytes.size() || !std::is_sorted(symbol_start.begin(), symbol_start.end()))
    return false;
  const auto n_alias = r.get<uint64_t>();
  for (uint64_t k = 0; r.ok && k < n_alias; ++k) {
    const std::string_view b = r.get_bytes();
    aliases.emplace(std::string(b), r.get<int32_t>());
  }
  // The tables that encoding reads stay in the mapped file. The bytes -> id index is only for
  // loading the files and is not saved: a read-back model has none (id_mask 0).
  size_t n_pairs = 0, n_results = 0, n_small = 0, n_large = 0;
  pair_table = r.view<PairEntry>(n_pairs);
  result_table = r.view<int32_t>(n_results);
  const auto* small = r.view<ShortTokens::Small>(n_small);
  const auto* large = r.view<ShortTokens::Large>(n_large);
  const bool ok = r.ok && r.in.empty() && n_pairs == pair_mask + 1 && n_results == merges && num_symbols() >= 256 &&
                  short_tokens.view(small, n_small, large, n_large, vocab_limit);
  return ok;
}

// The saved model at `path` when it is the one of these files (`key`) and its payload is whole.
bool Gpt2Bpe::Impl::load_saved(const std::string& path, uint64_t key) {
  MappedFile file;
  try {
    file = MappedFile(path);
  } catch (const Error&) {
    return false;  // not saved yet
  }
  const std::string_view bytes(reinterpret_cast<const char*>(file.data()), file.size());
  if (bytes.size() < sizeof(kModelMagic) + 16 || std::memcmp(bytes.data(), kModelMagic, sizeof(kModelMagic)) != 0) return false;
  Reader r{bytes.substr(sizeof(kModelMagic))};
  const auto saved_key = r.get<uint64_t>(), checksum = r.get<uint64_t>();
  if (saved_key != key || checksum != XXH3_64bits(r.in.data(), r.in.size()) || !deserialize(r.in)) return false;
  saved_file = std::move(file);  // the tables are read in place
  return true;
}

void Gpt2Bpe::Impl::save(const std::string& path, uint64_t key) const {
  const std::string payload = serialize();
  Writer w;
  w.out.append(kModelMagic, sizeof(kModelMagic));
  w.put(key);
  w.put(XXH3_64bits(payload.data(), payload.size()));
  w.out += payload;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  try {
    write_file_atomic(path, w.out);
  } catch (const Error&) {  // a read-only or full cache directory: the next load parses the files again
  }
}

Gpt2Bpe Gpt2Bpe::load(const std::string& vocab_path, const std::string& merges_path) {
  const MappedFile vocab_file(vocab_path, "cannot read vocab file"), merges_file(merges_path, "cannot read merges file");
  const std::string_view vocab_text(reinterpret_cast<const char*>(vocab_file.data()), vocab_file.size());
  const std::string_view merges_text(reinterpret_cast<const char*>(merges_file.data()), merges_file.size());
  const uint64_t key = XXH3_64bits_withSeed(merges_text.data(), merges_text.size(),
                                            XXH3_64bits(vocab_text.data(), vocab_text.size()) ^ vocab_text.size());
  const std::string dir = model_cache_dir();
  const std::string saved = dir.empty() ? "" : dir + "/gpt2-bpe-" + std::to_string(key) + ".model";
  if (!saved.empty()) {
    if (Gpt2Bpe bpe; bpe.impl_->load_saved(saved, key)) {
      bpe.impl_->place_hot_tables();
      return bpe;
    }
  }
  Gpt2Bpe bpe;
  Impl& m = *bpe.impl_;
  m.load_vocab(vocab_text, vocab_path);
  m.index_merges(m.read_merges(merges_text, merges_path, vocab_path), merges_path);
  m.mark_whole_tokens();
  m.index_whole_tokens();
  if (!saved.empty()) m.save(saved, key);
  m.place_hot_tables();
  return bpe;
}

// The two tables that encoding reads most (the whole tokens of up to 8 bytes and the merge
// pairs: 1 MiB each for GPT-2) copied into one range of huge pages where the kernel gives them.
// Read in place from the saved model's mapped file, they sat in whatever pages the page cache
// gave that file: part in a 2 MiB mapping, part in 4 KiB pages, the split differing from one
// write of the file to the next, and the same binary ran 0.8x with one such file against
// another. The longer tokens and the merges' results are read less and stay where they are.
void Gpt2Bpe::Impl::place_hot_tables() {
  const size_t n_small = short_tokens.small_size(), n_pairs = pair_mask + 1;
  const size_t small_bytes = n_small * sizeof(ShortTokens::Small), pair_bytes = n_pairs * sizeof(PairEntry);
  ZeroedPages pages(small_bytes + pair_bytes);
  auto* small = static_cast<ShortTokens::Small*>(pages.data());
  auto* pairs_copy = reinterpret_cast<PairEntry*>(small + n_small);  // 16-byte slots before it: aligned
  std::memcpy(small, short_tokens.small(), small_bytes);
  std::memcpy(pairs_copy, pair_table, pair_bytes);
  short_tokens.read_small_from(small);
  pair_table = pairs_copy;
  hot_pages = std::move(pages);
}

size_t Gpt2Bpe::vocab_size() const { return impl_->vocab_entries; }
int32_t Gpt2Bpe::eod_id() const { return impl_->eod; }
size_t Gpt2Bpe::num_merges() const { return impl_->merges; }
bool Gpt2Bpe::merges_well_formed() const { return impl_->well_formed; }

// Megatron's bpe(): merge every occurrence of the lowest-rank pair, left to right.
void Gpt2Bpe::Impl::bpe_short(const int32_t* init, size_t n, std::vector<int32_t>& out) const {
  // The symbols, and for each adjacent pair its rank (INT32_MAX: no merge) and result. After a
  // round only the pairs that touch a merged symbol are looked up again; the others keep theirs.
  struct Sym {
    int32_t value, rank;  // rank of the pair (this, next)
    bool merged;
  };
  constexpr size_t kStack = kShortPiece * 4 + 8;
  Sym stack_buf[2][kStack];
  std::vector<Sym> heap_buf[2];
  Sym* cur = stack_buf[0];
  Sym* nxt = stack_buf[1];
  if (n > kStack) {
    heap_buf[0].resize(n);
    heap_buf[1].resize(n);
    cur = heap_buf[0].data();
    nxt = heap_buf[1].data();
  }
  auto look_up = [this](Sym& s, int32_t next) { s.rank = pair_rank(s.value, next); };
  for (size_t i = 0; i < n; ++i) cur[i] = Sym{init[i], INT32_MAX, false};
  // The first lookups are independent: start every one's memory load before using any (the
  // pair table is larger than L2, and these misses were most of this function's time).
  for (size_t i = 0; i + 1 < n; ++i) __builtin_prefetch(&pair_table[pair_home(pair_key(cur[i].value, cur[i + 1].value))]);
  for (size_t i = 0; i + 1 < n; ++i) look_up(cur[i], cur[i + 1].value);
  while (n > 1) {
    int32_t best = INT32_MAX;
    for (size_t i = 0; i + 1 < n; ++i) best = std::min(best, cur[i].rank);
    if (best == INT32_MAX) break;
    // Every occurrence of the best pair, left to right (a rank names one pair).
    const int32_t made = result_table[static_cast<size_t>(best)];
    size_t k = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && cur[i].rank == best) {
        nxt[k++] = Sym{made, INT32_MAX, true};
        i += 2;
      } else {
        nxt[k] = cur[i++];
        nxt[k++].merged = false;
      }
    }
    for (size_t j = 0; j + 1 < k; ++j)
      if (nxt[j].merged || nxt[j + 1].merged) look_up(nxt[j], nxt[j + 1].value);
    if (k > 0) nxt[k - 1].rank = INT32_MAX;
    std::swap(cur, nxt);
    n = k;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(out_id(cur[i].value));
}

// bpe_short's result for well-formed merges, one merge at a time: the leftmost pair of the
// lowest rank is merged and only its two neighbouring pairs are looked up again (tiktoken's
// loop). Megatron merges every occurrence of that pair in one left-to-right pass; merging the
// leftmost one and looking again gives the same: the merge's result never takes part in a merge
// ranked as low (well_formed), so the next lowest pair is the next occurrence, if any, and its
// left symbol was not touched. A round of bpe_short passes over every symbol with a branch on
// each; this scans the ranks for the least (no branch to mispredict) and shifts the tail.
void Gpt2Bpe::Impl::bpe_leftmost(const int32_t* init, size_t n, std::vector<int32_t>& out) const {
  int32_t value[kShortPiece], rank[kShortPiece];
  for (size_t i = 0; i + 1 < n; ++i) __builtin_prefetch(&pair_table[pair_home(pair_key(init[i], init[i + 1]))]);
  for (size_t i = 0; i < n; ++i) value[i] = init[i];
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(value[i], value[i + 1]);
  rank[n - 1] = INT32_MAX;
  while (n > 1) {
    int32_t best = rank[0];
    size_t at = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      const bool less = rank[i] < best;  // strict: the leftmost of equals
      best = less ? rank[i] : best;
      at = less ? i : at;
    }
    if (best == INT32_MAX) break;
    value[at] = result_table[static_cast<size_t>(best)];
    for (size_t i = at + 1; i + 1 < n; ++i) value[i] = value[i + 1], rank[i] = rank[i + 1];
    --n;
    rank[at] = at + 1 < n ? pair_rank(value[at], value[at + 1]) : INT32_MAX;
    if (at > 0) rank[at - 1] = pair_rank(value[at - 1], value[at]);
  }
  for (size_t i = 0; i < n; ++i) out.push_back(out_id(value[i]));
}

// Same result in O(n log n): a heap of (rank, position) over a linked list.
void Gpt2Bpe::Impl::bpe_heap(const int32_t* init, size_t n, std::vector<int32_t>& out) const {
  struct Node { int32_t value; int32_t prev, next; };
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) nodes[i] = {init[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    int32_t nx = nodes[pos].next;
    if (nx < 0) return;
    if (const int32_t rank = pair_rank(nodes[pos].value, nodes[nx].value); rank != INT32_MAX)
      heap.push({rank, pos, nodes[pos].value, nodes[nx].value});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (dead[c.pos] || nodes[c.pos].value != c.left) continue;
    int32_t nx = nodes[c.pos].next;
    if (nx < 0 || nodes[nx].value != c.right) continue;
    nodes[c.pos].value = result_table[static_cast<size_t>(c.rank)];
    dead[nx] = true;
    nodes[c.pos].next = nodes[nx].next;
    if (nodes[nx].next >= 0) nodes[nodes[nx].next].prev = c.pos;
    if (nodes[c.pos].prev >= 0) push(nodes[c.pos].prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) out.push_back(out_id(nodes[i].value));
}

void Gpt2Bpe::Impl::bpe_bytes(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> init;
  for (char c : piece) init.push_back(byte_symbol[static_cast<uint8_t>(c)]);
  if (!init.empty()) bpe_short(init.data(), init.size(), out);
}

void Gpt2Bpe::Impl::mark_whole_tokens() {
  whole.assign(num_symbols(), 0);
  std::vector<int32_t> out;
  for (int32_t id = 0; id < vocab_limit && static_cast<size_t>(id) < num_symbols(); ++id) {
    const std::string_view b = symbol(static_cast<size_t>(id));
    if (b.size() < 2 || b.size() > kWholeTokenMax) continue;  // one byte has its own path
    out.clear();
    bpe_bytes(b, out);
    whole[static_cast<size_t>(id)] = out.size() == 1 && out[0] == id;
  }
}

void Gpt2Bpe::Impl::index_whole_tokens() {
  static const std::array<char, 256> kBytes = [] {
    std::array<char, 256> b{};
    for (int i = 0; i < 256; ++i) b[static_cast<size_t>(i)] = static_cast<char>(i);
    return b;
  }();
  std::vector<std::pair<std::string_view, int32_t>> tokens;
  for (size_t b = 0; b < 256; ++b) tokens.emplace_back(std::string_view(&kBytes[b], 1), out_id(byte_symbol[b]));  // as BPE leaves them
  for (size_t id = 0; id < whole.size(); ++id)
    if (whole[id] && symbol(id).size() <= kWholeTokenMax) tokens.emplace_back(symbol(id), static_cast<int32_t>(id));
  short_tokens.build(tokens);
}

void Gpt2Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out, BpeCache* cache) const {
  impl_->encode_piece(piece, piece.data() + piece.size(), out, impl_->own_cache(cache));
}

// `readable` ends the memory that may be read past the piece (the text it is part of).
void Gpt2Bpe::Impl::encode_piece(std::string_view piece, const char* readable, std::vector<int32_t>& out, BpeCache* cache) const {
  if (piece.empty()) return;
  if (piece.size() <= kWholeTokenMax) {
    const bool room = readable - piece.data() >= static_cast<ptrdiff_t>(kWholeTokenMax);
    const int32_t id = room ? short_tokens.find(piece.data(), piece.size()) : short_tokens.find_copy(piece.data(), piece.size());
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  encode_rare(piece, out, cache);
}

void Gpt2Bpe::Impl::encode_rare(std::string_view piece, std::vector<int32_t>& out, BpeCache* cache) const {
  const bool cacheable = cache && piece.size() <= kShortPiece;
  const uint64_t h = cacheable ? BpeCache::hash(piece) : 0;
  if (cacheable && cache->find(piece, h, out)) return;
  const size_t before = out.size();
  merge(piece, out);
  if (cacheable) cache->insert(piece, h, out.data() + before, out.size() - before);
}

void Gpt2Bpe::Impl::merge(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t init_buf[kShortPiece];
  std::vector<int32_t> init_vec;
  const int32_t* init = init_buf;
  if (piece.size() <= kShortPiece) {
    for (size_t i = 0; i < piece.size(); ++i) init_buf[i] = byte_symbol[static_cast<uint8_t>(piece[i])];
  } else {
    init_vec.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) init_vec[i] = byte_symbol[static_cast<uint8_t>(piece[i])];
    init = init_vec.data();
  }
  if (!well_formed) bpe_short(init, piece.size(), out);
  else if (piece.size() <= kShortPiece) bpe_leftmost(init, piece.size(), out);
  else bpe_heap(init, piece.size(), out);
}

void Gpt2Bpe::Impl::seed(BpeCache& cache) const {
  size_t small = 0, large = 0;
  for (size_t i = 0; i <= cache.mask_; ++i) {
    const size_t n = cache.slots_[i].hash == 0 ? 0 : cache.slots_[i].key_len;
    small += n != 0 && n <= 8, large += n > 8 && n <= kWholeTokenMax;
  }
  std::unique_ptr<BpeCache::Seeded, BpeCache::SeededDeleter> seeded(new BpeCache::Seeded);
  seeded->seed(short_tokens, small, large);
  for (size_t i = 0; i <= cache.mask_; ++i) {
    const BpeCache::Slot& s = cache.slots_[i];
    if (s.hash == 0 || s.key_len > kWholeTokenMax) continue;
    const auto one = static_cast<int32_t>(s.ids);
    seeded->add(s.key, s.key_len, s.ids_len == 1 ? &one : cache.ids_.data() + s.ids, s.ids_len);
  }
  cache.clear();  // its slots keep longer pieces only from now on
  cache.seeded_ = std::move(seeded);
}

namespace {
// The ids of pieces found in a ShortTokens table, gathered on the stack and appended to `out` a block
// at a time: one push_back per piece would load and store the vector's end through memory, a
// chain from each piece to the next.
class IdBuffer {
 public:
  explicit IdBuffer(std::vector<int32_t>& out) : out_(out) {}
  void flush() { out_.insert(out_.end(), buf_, buf_ + fill_), fill_ = 0; }
  // Room for one piece's ids (a piece of up to 16 bytes has up to 16).
  void make_room() {
    if (fill_ > kSize - kWholeTokenMax) flush();
  }
  // The id and a second one + 1 (0: none), as a seeded slot holds them.
  void add(int32_t id, uint32_t second) {
    buf_[fill_] = id;
    buf_[fill_ + 1] = static_cast<int32_t>(second - 1);
    fill_ += 1 + (second != 0);
  }
  void add(const int32_t* ids, size_t n) { std::memcpy(buf_ + fill_, ids, n * sizeof(int32_t)), fill_ += n; }

 private:
  static constexpr size_t kSize = 512;
  std::vector<int32_t>& out_;
  int32_t buf_[kSize];
  size_t fill_ = 0;
};
}  // namespace

// A batch of pieces at a time (the pre-tokenizer's 64): first every piece's key, its home slot's
// line requested, then the probes. Most of a pass waits on those slots (a few MiB of tables);
// requested together, their loads overlap instead of each miss waiting for the last. `table`: the
// model's whole tokens, or a seeded cache's table, whose slots also hold a second id and whose
// pieces of three ids or more are in `multi`. A piece of up to 16 bytes that `table` lacks goes to
// on_miss(piece), which appends its ids to `out`; a longer one to encode_rare.
template <typename OnMiss>
void Gpt2Bpe::Impl::encode_batches(std::string_view text, const ShortTokens& table, const std::vector<int32_t>* multi,
                                   std::vector<int32_t>& out, BpeCache* cache, OnMiss&& on_miss) const {
  const char* p = text.data();
  const char* const end = p + text.size();
  const char* ends[detail::kPieceBatch];
  ShortTokens::Key keys[detail::kPieceBatch];
  IdBuffer ids(out);
  while (p < end) {
    const size_t count = detail::scan_pieces(p, end, ends, detail::kPieceBatch);
    for (size_t j = 0; j < count; ++j) {
      const char* piece = j ? ends[j - 1] : p;
      const auto n = static_cast<size_t>(ends[j] - piece);
      if (n > kWholeTokenMax) continue;
      char padded[kWholeTokenMax] = {};
      if (end - piece < static_cast<ptrdiff_t>(kWholeTokenMax)) piece = static_cast<const char*>(std::memcpy(padded, piece, n));
      keys[j] = ShortTokens::key(piece, n);
      __builtin_prefetch(table.home_slot(keys[j]));
    }
    for (size_t j = 0; j < count; p = ends[j++]) {
      const std::string_view piece(p, static_cast<size_t>(ends[j] - p));
      ids.make_room();
      const uint64_t hit = piece.size() > kWholeTokenMax ? uint32_t{0xFFFFFFFF} : table.find_two(keys[j]);
      if (const auto v = static_cast<int32_t>(hit); v >= 0) {
        ids.add(v, static_cast<uint32_t>(hit >> (32 + ShortTokens::kLenBits)));
      } else if (v < -1) {
        const int32_t* several = multi->data() + (-2 - static_cast<ptrdiff_t>(v));
        ids.add(several + 1, static_cast<size_t>(several[0]));
      } else {
        ids.flush();
        if (piece.size() > kWholeTokenMax) encode_rare(piece, out, cache);
        else on_miss(piece);
      }
    }
  }
  ids.flush();
}

void Gpt2Bpe::Impl::encode_seeded(std::string_view text, std::vector<int32_t>& out, BpeCache& cache) const {
  BpeCache::Seeded& seeded = *cache.seeded_;
  encode_batches(text, seeded.table, &seeded.multi, out, &cache, [&](std::string_view piece) {
    if (seeded.added >= cache.max_entries_) seeded.seed(short_tokens, 0, 0);  // the bound: start again from the tokens
    const size_t before = out.size();
    merge(piece, out);
    seeded.add(piece.data(), piece.size(), out.data() + before, out.size() - before);
  });
}

std::vector<int32_t> Gpt2Bpe::encode_piece_reference(std::string_view piece) const {
  std::vector<int32_t> out;
  impl_->bpe_bytes(piece, out);
  return out;
}

void Gpt2Bpe::encode(std::string_view text, std::vector<int32_t>& out, BpeCache* cache) const {
  cache = impl_->own_cache(cache);
  if (cache) {
    cache->served_ += text.size();
    if (!cache->seeded_ && cache->served_ >= cache->seed_after_) impl_->seed(*cache);
    if (cache->seeded_) return impl_->encode_seeded(text, out, *cache);
  }
  impl_->encode_batches(text, impl_->short_tokens, nullptr, out, cache,
                        [&](std::string_view piece) { impl_->encode_rare(piece, out, cache); });
}

std::string Gpt2Bpe::decode_bytes(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= impl_->vocab_limit) throw Error(ErrorKind::Usage, "token id %d is outside the vocabulary", id);
    out += impl_->symbol(static_cast<size_t>(id));
  }
  return out;
}

std::string Gpt2Bpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  utf8_replace_invalid(decode_bytes(ids), out);  // Python's errors="replace"
  return out;
}

}  // namespace zlm
