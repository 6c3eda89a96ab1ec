// The chunked form of the GKA recurrence for prompt pieces (gka_chunked_prefill.cu), which
// LaunchGkaRecurrence (kernels/cuda/gka_recurrence.h) runs for the sequences of a step with at
// least kChunkedFromTokens tokens. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gka_recurrence.h"

namespace ridge::cuda {

// Sequences with this many tokens in a step go through the chunked kernel, the others token by
// token (below it a chunk's fixed costs outweigh the barriers it saves).
inline constexpr int32_t kChunkedFromTokens = 16;

// Whether the chunked kernel takes part in a step with these arguments (head_dim 128 and some
// sequence with kChunkedFromTokens tokens, as args.max_tokens says).
bool GkaChunkedPrefillTakes(const GkaRecurrenceArgs& args);

// Advances the sequences with at least kChunkedFromTokens tokens; the others are left alone.
cudaError_t LaunchGkaChunkedPrefill(const GkaRecurrenceArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
