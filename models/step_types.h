// What every backend's step names, whatever runs it: where a solve starts and which logits come
// back.
#pragma once

namespace ridge {

// Where a conjugate-gradient solve starts (MesaNet, as FLA does): prefill from zero, decode
// from the Jacobi guess. Chebyshev always starts the same way.
enum class SolvePhase { kPrefill, kDecode };

enum class LogitsFor { kAllTokens, kLastToken };

}  // namespace ridge
