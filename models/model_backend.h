// Where a model's forward pass runs and where its per-sequence memory lives: the engine talks to
// this interface, so the scheduler is the same on the CPU and on a GPU. A backend stores a fixed
// pool of recurrent-state slots and, for models with attention layers, a fixed pool of KV
// blocks; the engine does the bookkeeping (which slot and which blocks belong to whom) and each
// step names the slot and the block table of every sequence it advances.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/solver_types.h"
#include "models/model_spec.h"
#include "models/step_types.h"
#include "sampling/sampler.h"

namespace ridge {

struct SlotChunk {
  int64_t slot = 0;
  std::span<const int32_t> tokens;
  SolverOptions solver;
  SolverStats* stats = nullptr;  // optional: every solve of this chunk is added here
  SolvePhase phase = SolvePhase::kPrefill;
  // The sequence's KV block table (models with attention layers): entry i holds positions
  // [i * block_size, (i + 1) * block_size); it must cover every position up to the chunk's end.
  std::span<const int32_t> kv_blocks = {};
};

// The most alternatives (with their log-probabilities) a token pick may ask for.
inline constexpr int32_t kMaxTopLogprobs = 20;

// How one chunk of a step picks the token that follows it (ModelBackend::ForwardSample).
struct TokenPick {
  // The sequence's sampler (its parameters; the host path also uses its scratch space), or
  // null when the chunk wants no token (a prompt piece that does not end the prompt).
  Sampler* sampler = nullptr;
  double uniform = 0.0;  // sampler->NextDrawUniform(), taken by the caller for this pick
  std::span<const int32_t> prompt, generated;  // the history the penalties look at
  bool logprobs = false;                       // also return the log-probabilities
  int32_t top_logprobs = 0;                    // alternatives, with logprobs: 0..kMaxTopLogprobs
  // Prompt scoring (may be set with or without a sampler): row r of the chunk, r <
  // score_next.size() <= its tokens, is scored against the token that follows it, score_next[r]
  // (the raw log-softmax of that token and the score_top_logprobs most likely ones), into
  // PickedToken::scored[r]. How a request's prompt logprobs are computed.
  std::span<const int32_t> score_next = {};
  int32_t score_top_logprobs = 0;  // 0..kMaxTopLogprobs
};

struct PickedToken {
  int32_t token = 0;
  float logprob = 0.0f;  // of `token`: log-softmax of the raw logits (when asked)
  std::vector<std::pair<int32_t, float>> top;  // most likely first (when asked)
  // Scored rows: the tokens whose raw logit is at least the token's (1: the most likely), as
  // vLLM ranks a prompt token.
  int32_t rank = 0;
  // The scored rows (TokenPick::score_next), in order: token is the row's next token, logprob
  // its log-probability, rank its rank, top the alternatives asked for.
  std::vector<PickedToken> scored;
};

// Rows the picks of a step score (the sum of their score_next sizes).
int64_t ScoredRows(std::span<const TokenPick> picks);

// Scores one row of raw logits against `next`: its log-softmax and the `top` most likely tokens.
PickedToken ScoreOnHost(std::span<const float> row, int32_t next, int32_t top);

// Picks `pick`'s token from one row of logits on the host, as Sampler::SampleWithUniform does,
// with its log-probabilities when asked: how ModelBackend::ForwardSample picks each row, and how
// a GPU backend picks the rows its device sampler cannot (Sampler::NeedsHostLogits).
PickedToken PickOnHost(const TokenPick& pick, std::span<const float> row);

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual std::string_view name() const = 0;  // "cpu" or "cuda"
  virtual const ModelSpec& spec() const = 0;
  virtual int64_t num_slots() const = 0;
  // Bytes one slot's state takes in this backend's pool (the GPU's packs each Hs).
  virtual int64_t state_bytes_per_slot() const = 0;
  // The KV cache: how its blocks are laid out, and how many the backend stores (0 for a model
  // without attention layers).
  virtual const KvLayout& kv_layout() const = 0;
  virtual int64_t num_kv_blocks() const { return 0; }
  // Tokens a slot's sequence has consumed since its reset.
  virtual int64_t SlotPosition(int64_t slot) const = 0;
  // OK while the backend can take steps; otherwise why it never will again (a tensor-parallel
  // group whose NCCL communicators were aborted): its server should stop rather than fail every
  // request that follows.
  virtual absl::Status Health() const { return absl::OkStatus(); }
  // Prompt tokens per engine step when the user sets no budget. A step with prompt tokens holds
  // up every decoding sequence until they are done: the CPU's cost grows with the tokens, so a
  // small budget; the GPU's chunked prefill costs about the same for one chunk as for dozens
  // (each chunk's solve is one block), so a larger one (about three waves of those blocks).
  virtual int64_t preferred_prefill_tokens_per_step() const { return 512; }

  // Clears a slot to the start of a sequence (its KV blocks are the engine's to give back).
  virtual absl::Status ResetSlot(int64_t slot) = 0;
  // Copies a slot's whole state and its position into another slot (the KV blocks are the
  // engine's): how the prefix cache takes and restores snapshots.
  virtual absl::Status CopySlot(int64_t from, int64_t to) = 0;
  // Copies the contents of one KV block into another (a partly filled block shared with a
  // snapshot is copied before a sequence writes into it). The base refuses: no KV cache.
  virtual absl::Status CopyKvBlock(int32_t from, int32_t to);

  // A slot's and a KV block's contents exactly as this backend stores them, and back: how a
  // saved session goes to disk and returns. state_format() names that storage (empty: the
  // backend cannot export), so a file is only read into a backend that stores states the same
  // way; ImportSlot also sets the slot's position. The base refuses.
  virtual std::string state_format() const { return ""; }
  virtual absl::Status ExportSlot(int64_t slot, std::string* bytes);
  virtual absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position);
  virtual absl::Status ExportKvBlock(int32_t block, std::string* bytes);
  virtual absl::Status ImportKvBlock(int32_t block, std::string_view bytes);

  // Advances every chunk's slot over its tokens; one chunk per slot at most. `logits` receives
  // [rows, vocab] floats: one row per token (kAllTokens) or per chunk (kLastToken); nothing on a
  // tensor-parallel rank other than 0 (rank 0 answers for the group), whose ForwardGreedy and
  // ForwardSample then pick nothing either.
  virtual absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                               std::vector<float>* logits) = 0;

  // Like Forward with kLastToken, but returns only each chunk's most likely next token (the
  // lowest id among ties). A GPU backend does this without copying logits to the host.
  virtual absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                                     std::vector<int32_t>* next_tokens);

  // Like Forward with kLastToken, but each chunk's next token is picked by its TokenPick, as
  // Sampler::SampleWithUniform would pick it from the logits; picks[i] belongs to chunks[i].
  // The base version samples on the host; a GPU backend samples on the device and copies only
  // the picks back.
  virtual absl::Status ForwardSample(std::span<const SlotChunk> chunks,
                                     std::span<const TokenPick> picks,
                                     std::vector<PickedToken>* picked);

  // ForwardGreedy when every pick that wants a token is a plain argmax without logprobs (on a
  // GPU only the ids then cross to the host), else ForwardSample. The one way a step's tokens
  // are picked, for the engine and offline generation alike.
  absl::Status ForwardPick(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                           std::vector<PickedToken>* picked);

 protected:
  // Checks what every backend requires of a step: slots in range and distinct, tokens present
  // and in the vocabulary, solver options valid.
  absl::Status ValidateChunks(std::span<const SlotChunk> chunks) const;
  // Checks what every backend requires of a step's token picks: one per chunk, a sampler for
  // this vocabulary, the uniform in [0, 1), top_logprobs in range, history tokens in the
  // vocabulary; scored rows within the chunk, their next tokens in the vocabulary.
  absl::Status ValidatePicks(std::span<const SlotChunk> chunks,
                             std::span<const TokenPick> picks) const;
  // An error naming the slot unless 0 <= slot < num_slots().
  absl::Status CheckSlot(int64_t slot) const;
  // An error naming the block unless 0 <= block < num_kv_blocks().
  absl::Status CheckKvBlock(int32_t block) const;
  // An error unless an imported state or block has the `expected` size.
  absl::Status CheckImport(std::string_view what, std::string_view bytes, int64_t expected) const;
};

}  // namespace ridge
