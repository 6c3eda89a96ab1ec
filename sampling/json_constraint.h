// Constrained decoding to JSON: at each step only the tokens whose bytes keep the output a
// possible instance may be drawn, and once it is complete only a token that ends the output. The
// instance is any JSON object (OpenAI's response_format {"type": "json_object"},
// sampling/json_grammar.h) or one of a schema (response_format {"type": "json_schema"},
// sampling/json_schema.h).
//
// JsonVocabulary (sampling/json_vocabulary.h) is the model's vocabulary as bytes, shared by every
// constrained request; JsonConstraint is one sequence's place in its output.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "sampling/json_grammar.h"
#include "sampling/json_schema.h"
#include "sampling/json_vocabulary.h"

namespace ridge {

class JsonConstraint {
 public:
  // `end_ids`: the tokens that end the output (the model's end-of-sequence tokens and the
  // request's stop tokens); they are allowed once the instance is complete, and only then.
  // Without `schema`, the instance is any JSON object.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<int32_t> end_ids,
                 std::shared_ptr<const JsonSchema> schema = nullptr);

  // Sets to -inf the logits of the tokens that may not come next, and returns the lowest id that
  // may (for a caller whose remaining logits are all -inf). Should the request's stop tokens have
  // taken every token that could go on, only the end tokens are left: the output ends there,
  // short of a whole instance, rather than with no token at all.
  int32_t MaskLogits(std::span<float> logits);
  // Moves past `token`, which MaskLogits allowed (an end token moves nothing).
  void Accept(int32_t token);
  // Moves past `text`, written before the output (the start of the object), and returns
  // text.size(); or, when no instance begins so, returns how many of its bytes could begin one
  // and leaves the constraint where it was. Before the first token only.
  size_t AcceptPrefix(std::string_view text);

  // Lets the output open with `open` (a reasoning model's "<think>", a special token without
  // bytes), after which every token is free until `close` ("</think>") and the instance begins
  // after it: the model may think before it answers in JSON, as vLLM's structured outputs let a
  // model with a reasoning parser. Without it the first token belongs to the instance. Before
  // the first token only, and not after AcceptPrefix moved past text.
  void AllowReasoningFirst(int32_t open, int32_t close);
  bool reasoning() const { return phase_ == Phase::kReasoning; }

  // Complete: the instance, not reasoning before it.
  bool complete() const;

 private:
  enum class Phase { kInstance, kMayReason, kReasoning };

  std::shared_ptr<const TokenBits> AllowedBits() const;
  bool InstanceComplete() const;
  int32_t MaskInstance(std::span<float> logits);

  std::shared_ptr<const JsonVocabulary> vocabulary_;
  std::shared_ptr<const JsonSchema> schema_;  // null: any object
  std::vector<int32_t> end_ids_;              // sorted, distinct
  TokenBits end_bits_;                        // the same as bits
  std::variant<JsonByteState, JsonSchemaState> state_;
  Phase phase_ = Phase::kInstance;
  int32_t reasoning_open_ = -1, reasoning_close_ = -1;
};

// How many bytes of `text`, from its first, could begin an instance (of `schema`, or when it is
// null of any object): text.size() when all of them could.
size_t JsonStartFitting(const JsonSchema* schema, std::string_view text);

}  // namespace ridge
