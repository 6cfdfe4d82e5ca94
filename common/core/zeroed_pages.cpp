#include "common/core/zeroed_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

namespace zlm {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
}  // namespace

ZeroedPages::ZeroedPages(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  // A huge page needs an aligned 2 MiB range: map one more and trim the ends to alignment.
  const bool huge = bytes >= kHugePage;
  const size_t want = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : (bytes + kPage - 1) / kPage * kPage;
  const size_t extra = huge ? kHugePage : 0;
  void* p = ::mmap(nullptr, want + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<char*>(p);
  if (huge) {
    const size_t lead = (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
    if (lead > 0) ::munmap(base, lead);
    if (extra - lead > 0) ::munmap(base + lead + want, extra - lead);
    base += lead;
    ::madvise(base, want, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
  }
  data_ = base;
  mapped_ = want;
}

void ZeroedPages::release() {
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  bytes_ = mapped_ = 0;
}

void ZeroedPages::clear() {
  // MADV_DONTNEED on private anonymous memory: the next read or write sees zeroes.
  if (data_ && ::madvise(data_, mapped_, MADV_DONTNEED) != 0) std::memset(data_, 0, bytes_);
}

ZeroedPages::~ZeroedPages() { release(); }

ZeroedPages::ZeroedPages(ZeroedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), mapped_(std::exchange(other.mapped_, 0)) {}

ZeroedPages& ZeroedPages::operator=(ZeroedPages&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace zlm
