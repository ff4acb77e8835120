#include "tests/support/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int> g_open{0};           // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
std::atomic<int> g_allocations{0};    // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
std::atomic<std::size_t> g_bytes{0};  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
}  // namespace

// A replacement operator new manages raw memory with malloc/free. GCC's
// -Wmismatched-new-delete cannot see that the pair below is consistent.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (g_open.load(std::memory_order_relaxed) > 0) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(size, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;  // NOLINT(cppcoreguidelines-*)
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}  // NOLINT(cppcoreguidelines-*)
void operator delete(void* p, std::size_t /*size*/) noexcept {
  std::free(p);
}  // NOLINT(cppcoreguidelines-*)
#pragma GCC diagnostic pop

namespace abox::testing {

AllocationCounter::AllocationCounter() : start_(g_allocations.load()), start_bytes_(g_bytes.load()) {
  g_open.fetch_add(1);
}
AllocationCounter::~AllocationCounter() {
  g_open.fetch_sub(1);
}
int AllocationCounter::count() const {
  return g_allocations.load() - start_;
}
std::size_t AllocationCounter::bytes() const {
  return g_bytes.load() - start_bytes_;
}

}  // namespace abox::testing

// Under AddressSanitizer the replacement above is a malloc/free pair that ASan
// cannot tell apart from a mismatched new/free; the pairing is correct by
// construction, so that one check is turned off for test binaries.
extern "C" const char* __asan_default_options() {  // NOLINT(readability-identifier-naming)
  return "alloc_dealloc_mismatch=0";
}
