// Helpers shared by the sampler's tests.
#pragma once

#include <cstdlib>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace ridge::testing {

// A sampler of `params`, which the test expects to be valid (it fails and stops otherwise).
inline Sampler MakeSampler(const SamplingParams& params, int32_t vocab_size) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, vocab_size);
  if (!sampler.ok()) {
    ADD_FAILURE() << sampler.status();
    std::abort();
  }
  return std::move(sampler).value();
}

}  // namespace ridge::testing
