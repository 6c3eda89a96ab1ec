// Invariant checks: a violated invariant is a bug in ridgeserve, never a user error, so it
// aborts with file and line. Errors that input can cause are absl::Status values instead.
#pragma once

#include <cstdio>
#include <cstdlib>

#define RIDGE_CHECK(cond)                                                                 \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
