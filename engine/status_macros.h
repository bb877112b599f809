// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
#ifndef MLASERVE_ENGINE_STATUS_MACROS_H_
#define MLASERVE_ENGINE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MLASERVE_STATUS_CONCAT_INNER(a, b) a##b
#define MLASERVE_STATUS_CONCAT(a, b) MLASERVE_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                                             \
  do {                                                                    \
    if (absl::Status mlaserve_status = (expr); !mlaserve_status.ok()) {   \
      return mlaserve_status;                                             \
    }                                                                     \
  } while (0)

#define MLASERVE_ASSIGN_OR_RETURN_IMPL(var, lhs, expr) \
  auto var = (expr);                                   \
  if (!var.ok()) return std::move(var).status();       \
  lhs = std::move(*var)

// `lhs` may be a declaration (`auto x`) or an existing lvalue.
#define ASSIGN_OR_RETURN(lhs, expr) \
  MLASERVE_ASSIGN_OR_RETURN_IMPL(MLASERVE_STATUS_CONCAT(status_or_, __LINE__), lhs, expr)

#endif  // MLASERVE_ENGINE_STATUS_MACROS_H_
