// Zeroed memory for a large table that is filled at random places (a hash table): mapped
// anonymously, so it costs nothing until touched, and offered to the kernel for transparent
// huge pages (madvise), so that touching it all costs one page fault per 2 MiB rather than one
// per 4 KiB. Page faults were the largest cost of a short preprocess_data run after the
// tokenizer itself (docs/benchmarks.md). Where huge pages are off, it is plain zeroed memory.
//
//   zlm::ZeroedPages mem(bytes);            // throws std::bad_alloc
//   auto* slots = static_cast<Slot*>(mem.data());
#pragma once

#include <cstddef>

namespace zlm {

class ZeroedPages {
 public:
  ZeroedPages() = default;
  explicit ZeroedPages(size_t bytes);
  ~ZeroedPages();
  ZeroedPages(ZeroedPages&& other) noexcept;
  ZeroedPages& operator=(ZeroedPages&& other) noexcept;
  ZeroedPages(const ZeroedPages&) = delete;
  ZeroedPages& operator=(const ZeroedPages&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  // Zero again (pages handed back to the kernel: the next touch maps fresh zero pages).
  void clear();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;   // asked for
  size_t mapped_ = 0;  // mapped, a multiple of the huge page size when that applies
};

}  // namespace zlm
