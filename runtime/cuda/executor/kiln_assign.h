// KILN_ASSIGN(var, expr): declares `var` as the value of the Result `expr`,
// or returns its error from the enclosing function. One definition for the
// executor's files.
#pragma once

#define KILN_ASSIGN(var, expr)                         \
  auto var##_result = (expr);                          \
  if (!var##_result.ok()) return var##_result.error(); \
  auto var = var##_result.take()
