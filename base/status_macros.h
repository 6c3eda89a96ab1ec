// Early-return helpers for absl::Status / absl::StatusOr, in the style of Triton's RETURN_IF_ERROR.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RIDGE_CONCAT_INNER(a, b) a##b
#define RIDGE_CONCAT(a, b) RIDGE_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status ridge_status_ = (expr);         \
    if (!ridge_status_.ok()) return ridge_status_; \
  } while (0)

#define RIDGE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// ASSIGN_OR_RETURN(auto x, MakeX()); declares x, or returns MakeX()'s error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  RIDGE_ASSIGN_OR_RETURN_IMPL(RIDGE_CONCAT(ridge_statusor_, __LINE__), lhs, expr)
