// Result<T, E>: a value or an error, for the data path where exceptions are
// not used (C++20 has no std::expected).
//
// Invariants: a Result holds exactly one of a T or an E. Reading the wrong
// one is a broken invariant and aborts (even in release builds): callers
// check ok() first. [[nodiscard]] so that an error is never dropped silently.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

namespace abox::base {

// Err<E> marks a value as the error side when constructing a Result.
template <class E>
struct Err {
  E error;
};
template <class E>
Err(E) -> Err<E>;

[[noreturn]] inline void result_misuse(const char* what) {
  std::fprintf(stderr, "abox: Result misuse: %s\n", what);
  std::abort();
}

template <class T, class E>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  using error_type = E;

  // Implicit from a value or an Err, so `return value;` and
  // `return Err{E::kind};` both read naturally.
  template <class U = T>
  requires std::is_constructible_v<T, U&&> &&
      (!std::is_same_v<std::remove_cvref_t<U>, Result>)Result(U&& value)
      : state_(std::in_place_index<0>, std::forward<U>(value)) {}  // NOLINT
  template <class G>
  Result(Err<G> err) : state_(std::in_place_index<1>, std::move(err.error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    if (!ok()) result_misuse("value() on an error");
    return *std::get_if<0>(&state_);
  }
  const T& value() const& {
    if (!ok()) result_misuse("value() on an error");
    return *std::get_if<0>(&state_);
  }
  T&& value() && {
    if (!ok()) result_misuse("value() on an error");
    return std::move(*std::get_if<0>(&state_));
  }
  const E& error() const& {
    if (ok()) result_misuse("error() on a value");
    return *std::get_if<1>(&state_);
  }
  E&& error() && {
    if (ok()) result_misuse("error() on a value");
    return std::move(*std::get_if<1>(&state_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *std::get_if<0>(&state_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, E> state_;
};

// Result<void, E>: success carries nothing.
template <class E>
class [[nodiscard]] Result<void, E> {
 public:
  Result() = default;
  template <class G>
  Result(Err<G> err) : error_(std::move(err.error)), failed_(true) {}  // NOLINT

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const E& error() const {
    if (!failed_) result_misuse("error() on a success");
    return error_;
  }

 private:
  E error_{};
  bool failed_ = false;
};

}  // namespace abox::base
