// KILN_ASSIGN(lhs, expr): assigns the value of the Result `expr` to `lhs`,
// or returns its error from the enclosing function. For the config readers.
#pragma once

#define KILN_ASSIGN(lhs, expr)                 \
  do {                                         \
    auto kiln_r_ = (expr);                     \
    if (!kiln_r_.ok()) return kiln_r_.error(); \
    lhs = kiln_r_.take();                      \
  } while (0)
