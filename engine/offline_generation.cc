#include "engine/offline_generation.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "engine/kv_block_pool.h"
#include "models/cpu_backend.h"
#include "sampling/sampler.h"

namespace ridge {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct ActiveSequence {
  const GenerationRequest* request;
  GenerationResult* result;
  int64_t slot;
  Sampler sampler;
  int32_t next_token = 0;
  bool done = false;
  int64_t position = 0;  // tokens in its memory
  BlockTable blocks = {};
};

// Records `token` as sampled; returns true when the sequence ends with it.
bool Accept(ActiveSequence& seq, int32_t token, const ModelSpec& spec) {
  const SamplingParams& p = seq.request->sampling;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
      p.stop_token_ids.end()) {
    seq.result->finish_reason = FinishReason::kStop;
    return true;
  }
  if (!p.ignore_eos && spec.IsEos(token)) {
    seq.result->finish_reason = FinishReason::kEos;
    return true;
  }
  seq.result->tokens.push_back(token);
  seq.next_token = token;
  if (static_cast<int32_t>(seq.result->tokens.size()) >= p.max_tokens) {
    seq.result->finish_reason = FinishReason::kLength;
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<GenerationResult>> GenerateOffline(
    const Model& model, std::span<const GenerationRequest> requests, GenerationTimings* timings) {
  int64_t blocks = 0;
  for (const GenerationRequest& r : requests) {
    blocks += model.decoder().kv_layout().BlocksFor(static_cast<int64_t>(r.prompt.size()) +
                                                    r.sampling.max_tokens);
  }
  CpuBackend backend(&model.decoder(), std::max<int64_t>(1, static_cast<int64_t>(requests.size())),
                     blocks);
  return GenerateOffline(backend, requests, timings);
}

absl::StatusOr<std::vector<GenerationResult>> GenerateOffline(
    ModelBackend& backend, std::span<const GenerationRequest> requests,
    GenerationTimings* timings) {
  const ModelSpec& spec = backend.spec();
  if (static_cast<int64_t>(requests.size()) > backend.num_slots()) {
    return absl::InvalidArgumentError(
        absl::StrCat(requests.size(), " requests need as many slots; the ",
                     std::string(backend.name()), " backend has ", backend.num_slots()));
  }
  const int32_t vocab = static_cast<int32_t>(spec.vocab_size);
  std::vector<GenerationResult> results(requests.size());
  std::vector<ActiveSequence> sequences;
  sequences.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& request = requests[i];
    if (request.prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": the prompt is empty"));
    }
    for (int32_t id : request.prompt) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("request ", i, ": prompt token id ", id,
                                                       " is outside the vocabulary [0, ", vocab,
                                                       ")"));
      }
    }
    const int64_t tokens =
        static_cast<int64_t>(request.prompt.size()) + request.sampling.max_tokens;
    if (spec.max_position_embeddings > 0 && tokens > spec.max_position_embeddings) {
      return absl::OutOfRangeError(absl::StrCat(
          "request ", i, ": the prompt (", request.prompt.size(), " tokens) plus max_tokens (",
          request.sampling.max_tokens, ") is more than the model's context of ",
          spec.max_position_embeddings, " tokens (max_position_embeddings)"));
    }
    auto sampler = Sampler::Create(request.sampling, vocab,
                                   OutputEndTokens(spec.eos_token_ids, request.sampling));
    if (!sampler.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": ", sampler.status().message()));
    }
    sequences.push_back({&request, &results[i], static_cast<int64_t>(i), std::move(*sampler)});
  }
  const KvLayout& kv = backend.kv_layout();
  int64_t blocks_needed = 0;
  for (const GenerationRequest& r : requests) {
    blocks_needed += kv.BlocksFor(static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens);
  }
  if (blocks_needed > backend.num_kv_blocks()) {
    return absl::OutOfRangeError(absl::StrCat(
        "the prompts plus max_tokens need ", blocks_needed, " KV blocks of ", kv.block_size,
        " tokens; the ", std::string(backend.name()), " backend has ", backend.num_kv_blocks()));
  }
  KvBlockPool pool(backend.num_kv_blocks());
  for (const ActiveSequence& seq : sequences) RETURN_IF_ERROR(backend.ResetSlot(seq.slot));
  GenerationTimings local;
  GenerationTimings& t = timings != nullptr ? *timings : local;
  t = GenerationTimings{};

  std::vector<SlotChunk> chunks;
  // One step: every sequence of the batch gets its next token, picked as the engine picks it
  // (ModelBackend::ForwardPick: on a GPU only the tokens cross to the host).
  std::vector<TokenPick> picks;
  std::vector<PickedToken> picked;
  auto step = [&](std::span<ActiveSequence*> batch) -> absl::Status {
    picks.clear();
    for (ActiveSequence* seq : batch) {
      picks.push_back({&seq->sampler, seq->sampler.NextDrawUniform(), seq->request->prompt,
                       seq->result->tokens});
    }
    RETURN_IF_ERROR(backend.ForwardPick(chunks, picks, &picked));
    for (size_t i = 0; i < batch.size(); ++i) {
      ++t.generated_tokens;
      batch[i]->done = Accept(*batch[i], picked[i].token, spec);
    }
    return absl::OkStatus();
  };

  auto start = std::chrono::steady_clock::now();
  std::vector<ActiveSequence*> batch;
  for (ActiveSequence& seq : sequences) {
    RIDGE_CHECK(seq.blocks.Grow(kv, static_cast<int64_t>(seq.request->prompt.size()), pool));
    seq.position = static_cast<int64_t>(seq.request->prompt.size());
    chunks.push_back({seq.slot, seq.request->prompt, seq.request->solver,
                      &seq.result->prefill_solver, SolvePhase::kPrefill, seq.blocks.entries()});
    batch.push_back(&seq);
    t.prompt_tokens += static_cast<int64_t>(seq.request->prompt.size());
  }
  RETURN_IF_ERROR(step(batch));
  t.prefill_seconds = SecondsSince(start);

  start = std::chrono::steady_clock::now();
  while (true) {
    batch.clear();
    chunks.clear();
    for (ActiveSequence& seq : sequences) {
      if (seq.done) continue;
      batch.push_back(&seq);
      RIDGE_CHECK(seq.blocks.Grow(kv, ++seq.position, pool));  // counted above
      chunks.push_back({seq.slot,
                        {&seq.next_token, 1},
                        seq.request->solver,
                        &seq.result->decode_solver,
                        SolvePhase::kDecode,
                        seq.blocks.entries()});
    }
    if (batch.empty()) break;
    RETURN_IF_ERROR(step(batch));
    ++t.decode_steps;
  }
  t.decode_seconds = SecondsSince(start);
  return results;
}

}  // namespace ridge
