// kiln's error type for MLIR-free code: a one-line message that names the file,
// field or request and what was expected. Readers and runtime components return
// Result<T> instead of throwing across their public API, so the exception-free
// compiler can call them safely.
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

struct Error {
  std::string message;
};

// makeError("{}: tensor '{}' offset {} is past the end ({} bytes)", path, ...)
template <typename... Args>
Error makeError(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

// A value or an Error. Deliberately small: ok(), value(), take(), error().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(Error error) : state_(std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  T& value() {
    assert(ok());
    return std::get<T>(state_);
  }
  const T& value() const {
    assert(ok());
    return std::get<T>(state_);
  }
  T take() {
    assert(ok());
    return std::move(std::get<T>(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<Error>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// Success or an Error, for operations with no value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}
  static Status success() { return Status(); }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(failed_);
    return error_;
  }

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace kiln

// Propagates a failed Status or Result from the enclosing function.
#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    auto kiln_status_ = (expr);               \
    if (!kiln_status_.ok())                   \
      return ::kiln::Error(kiln_status_.error()); \
  } while (0)
