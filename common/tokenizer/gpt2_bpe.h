// GPT-2 byte-level BPE: vocab.json + merges.txt, encode and decode
// (docs/compatibility.md, "Tokenizer"; the legacy Megatron GPT2BPETokenizer).
//
//   auto bpe = zlm::Gpt2Bpe::load("gpt2-vocab.json", "gpt2-merges.txt");
//   zlm::BpeCache cache;                       // one per thread
//   std::vector<int32_t> ids;
//   bpe.encode("Hello world", ids, &cache);    // appends 15496, 995
//   std::string text = bpe.decode(ids);
//
// Loading follows Megatron exactly: merges.txt is split on '\n' and its first
// and last elements are dropped (the "#version" header and the empty string
// after the final newline; a file without a trailing newline loses its last
// merge, as in Megatron); each remaining line is split on ASCII whitespace into
// a pair whose rank is its position. Symbols are byte strings (the
// byte-to-unicode table is applied only to read and write the files). A merge
// whose parts or result are missing from the vocab still takes part in BPE; a
// final symbol missing from the vocab maps to id 0, as Megatron's table does.
//
// encode(): pre-tokenizes (common/tokenizer/gpt2_pretokenizer.h), then for each piece
// repeatedly merges every occurrence of the lowest-rank adjacent pair, left to
// right (Megatron's bpe()). A piece spelled as a vocabulary token whose own bytes
// merge back into it alone (checked at load for every token of up to 16 bytes; all
// of GPT-2's are) is that token without merging (most pieces of text), looked up in
// a table that keeps those tokens' bytes in its slots. Other short pieces use the
// merge loop directly; long pieces
// (> 64 bytes) use a heap over a linked list, O(n log n), which gives the same
// result because a merge's result never takes part in a lower-ranked merge in a
// well-formed merges file (checked at load; otherwise the plain loop is used
// for every piece). Results for pieces up to 64 bytes are memoised in the
// caller's BpeCache (bounded; cleared when full). The literal text
// "<|endoftext|>" is ordinary text here; only append the EOD id yourself.
// A loaded Gpt2Bpe is immutable and thread-safe; BpeCache is per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/zeroed_pages.h"

namespace zlm {

// Per-thread memo of piece -> ids: an open-addressing table (XXH3 hashes,
// linear probing) of 32-byte slots. A piece of up to 16 bytes is kept in its
// slot, and so is its id when it has one (most pieces of text), so such a hit
// reads one cache line; longer pieces and longer id lists live in two arenas
// that the slot points into. Memory is bounded: when it holds max_entries
// pieces it is cleared and refilled. The slots are zeroed pages (ZeroedPages),
// 2 MiB to start with: one huge page where the kernel gives them. Not thread-safe.
//
// A cache that lives long (Gpt2Bpe::encode has given it seed_after bytes of text, 8 MiB by
// default) is seeded: it takes a writable copy of the model's whole-token tables, moves its
// pieces of up to 16 bytes into it, and from then on keeps such pieces there, so that one costs
// a single probe whether it is a token or a piece merged before (otherwise the whole-token
// table's miss, a hash and this table's probe). Seeding takes about 1 ms, plus ~0.25 us per
// piece moved (14 ms for 50,000), once per cache; a shorter run never pays it. That table
// holds at most max_entries pieces too (then starts again from the tokens). The ids are the
// same either way.
class BpeCache {
 public:
  explicit BpeCache(size_t max_entries = 1 << 18, size_t seed_after = size_t{8} << 20);
  BpeCache(const BpeCache&) = delete;  // slots_ points into memory_: one owner, never moved
  BpeCache& operator=(const BpeCache&) = delete;
  static uint64_t hash(std::string_view piece);
  // On a hit, appends the ids to `out` and returns true. `h` is hash(piece).
  bool find(std::string_view piece, uint64_t h, std::vector<int32_t>& out) const;
  bool find(std::string_view piece, std::vector<int32_t>& out) const { return find(piece, hash(piece), out); }
  // Pieces over 255 bytes or 255 ids are not kept.
  void insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n);
  void insert(std::string_view piece, const int32_t* ids, size_t n) { insert(piece, hash(piece), ids, n); }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInlineKey = 16;
  struct alignas(32) Slot {
    uint64_t hash;      // 0 = empty
    uint8_t key_len;    // bytes of the piece
    uint8_t ids_len;    // its ids
    uint16_t unused;
    uint32_t ids;       // the id when ids_len == 1, else its ids' offset in ids_
    char key[kInlineKey];  // the piece when key_len <= 16, else its offset in keys_ (4 bytes)
  };
  static_assert(sizeof(Slot) == 32);
  void grow();
  void clear();  // the pieces in the slots (the seeded table stays)
  void reset();  // everything: the cache as new (another model uses it)
  // The model whose pieces it holds (Gpt2Bpe clears it when another model uses it).
  friend class Gpt2Bpe;
  uint64_t model_ = 0;
  size_t max_entries_, size_ = 0;
  ZeroedPages memory_;  // the slots
  Slot* slots_ = nullptr;
  size_t mask_ = 0;     // slots - 1 (a power of two)
  std::vector<char> keys_;
  std::vector<int32_t> ids_;
  // The seeded table (gpt2_bpe.cpp), made once `served_` bytes of text reach `seed_after_`.
  struct Seeded;
  struct SeededDeleter {
    void operator()(Seeded* s) const;
  };
  std::unique_ptr<Seeded, SeededDeleter> seeded_;
  size_t seed_after_, served_ = 0;
};

class Gpt2Bpe {
 public:
  // Throws zlm::Error(Io/Format) naming the file and line for unreadable or malformed files.
  static Gpt2Bpe load(const std::string& vocab_path, const std::string& merges_path);
  Gpt2Bpe(Gpt2Bpe&&) noexcept;
  Gpt2Bpe& operator=(Gpt2Bpe&&) noexcept;
  ~Gpt2Bpe();

  // Appends the ids of `text` to `out`. O(n log n) worst case, O(n) typical.
  void encode(std::string_view text, std::vector<int32_t>& out, BpeCache* cache = nullptr) const;
  // Encodes one pre-tokenized piece (appends to out).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, BpeCache* cache = nullptr) const;
  // Megatron's algorithm verbatim on one piece (slow; the tests' reference).
  std::vector<int32_t> encode_piece_reference(std::string_view piece) const;
  // Bytes of the ids, concatenated. Unknown ids throw zlm::Error(Usage).
  std::string decode_bytes(const std::vector<int32_t>& ids) const;
  // decode_bytes() as UTF-8 with invalid sequences replaced by U+FFFD (Python's errors="replace").
  std::string decode(const std::vector<int32_t>& ids) const;

  // Number of vocab entries (Megatron's vocab_size, unpadded).
  size_t vocab_size() const;
  // Id of "<|endoftext|>", or -1 when the vocab lacks it.
  int32_t eod_id() const;
  size_t num_merges() const;
  bool merges_well_formed() const;

 private:
  Gpt2Bpe();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPT-2's reversible byte <-> printable code point table (§3.2).
uint32_t gpt2_byte_to_codepoint(uint8_t b);
// Inverse; -1 for code points outside the table.
int gpt2_codepoint_to_byte(uint32_t cp);

}  // namespace zlm
