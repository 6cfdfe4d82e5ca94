// DefaultInitAllocator: std::allocator whose value-initialisation of trivial
// types is default-initialisation, so `std::vector<char, DefaultInitAllocator<char>> v(n)`
// and `v.resize(n)` leave the new bytes unwritten. For buffers that are about to
// be overwritten (a 4 MiB read buffer zeroed first costs its pages twice).
#pragma once

#include <memory>
#include <new>
#include <utility>

namespace zlm {

template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() noexcept = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

}  // namespace zlm
