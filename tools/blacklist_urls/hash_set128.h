// A set of 128-bit hashes (e.g. XXH3-128 of URLs) in one flat open-addressing
// table: 16 bytes per slot, load factor <= 1/2, linear probing. With 128-bit
// hashes, a false "already seen" needs a collision of ~2^-128 per pair.
//
//   zlm::HashSet128 seen;
//   if (seen.insert(lo, hi)) { /* first time */ }
//
// Not thread-safe. insert() is amortised O(1); memory 32 bytes per element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zlm {

class HashSet128 {
 public:
  HashSet128() : slots_(1024) {}
  // Returns true when (lo, hi) was not in the set yet. (0, 0) is stored out of band.
  bool insert(uint64_t lo, uint64_t hi) {
    if (lo == 0 && hi == 0) {
      bool fresh = !has_zero_;
      has_zero_ = true;
      size_ += fresh;
      return fresh;
    }
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(lo) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.lo == 0 && s.hi == 0) {
        s = {lo, hi};
        ++size_;
        return true;
      }
      if (s.lo == lo && s.hi == hi) return false;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t lo = 0, hi = 0;
  };
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.lo == 0 && s.hi == 0) continue;
      size_t i = static_cast<size_t>(s.lo) & mask;
      while (slots_[i].lo != 0 || slots_[i].hi != 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  bool has_zero_ = false;
};

}  // namespace zlm
