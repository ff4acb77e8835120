// Counts heap allocations made through operator new while a scope is open,
// so tests can hold data-path code to its "allocation-free" promise.
// Linked into a test binary, tests/support/alloc_counter.cc replaces the
// global operator new/delete for that whole binary.
#pragma once

#include <cstddef>

namespace abox::testing {

class AllocationCounter {
 public:
  AllocationCounter();
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  // Allocations since this counter was made.
  int count() const;
  // Bytes asked for by those allocations (frees are not subtracted).
  std::size_t bytes() const;

 private:
  int start_;
  std::size_t start_bytes_;
};

}  // namespace abox::testing
