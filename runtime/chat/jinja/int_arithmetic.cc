// Integer arithmetic on template values. Python's ints are unbounded and
// kiln's are 64-bit: a result outside int64 is an error naming the
// operation, never a wrapped value (signed overflow is undefined in C++).
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "runtime/chat/jinja/builtins.h"

namespace kiln::jinja {
namespace {

Error overflow(std::string_view op, int64_t x, int64_t y) {
  return makeError("integer overflow: {} {} {} is outside the 64-bit range kiln's templates compute in", x,
                   op, y);
}

// x ** y for y >= 0, by squaring.
Result<Value> power(int64_t x, int64_t y) {
  int64_t result = 1, base = x;
  for (uint64_t e = uint64_t(y); e != 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return overflow("**", x, y);
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow("**", x, y);
  }
  return Value(result);
}

}  // namespace

Result<Value> intArithmetic(std::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? Result<Value>(overflow(op, x, y)) : Value(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? Result<Value>(overflow(op, x, y)) : Value(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? Result<Value>(overflow(op, x, y)) : Value(r);
  if (op == "**") return power(x, y);
  if (y == 0) return makeError("integer division or modulo by zero");
  // The one quotient int64 cannot hold; its remainder is 0.
  if (x == std::numeric_limits<int64_t>::min() && y == -1)
    return op == "%" ? Result<Value>(Value(int64_t(0))) : Result<Value>(overflow(op, x, y));
  // Python floors the quotient; the remainder takes the divisor's sign.
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  if (op == "//") return Value(q);
  if (op == "%") return Value(m);
  return makeError("'{}' is not an integer operator", op);
}

}  // namespace kiln::jinja
