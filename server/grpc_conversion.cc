#include "server/grpc_conversion.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "sampling/sampling_params.h"

namespace ridge {
namespace {

absl::Status NoTokenizer(const ServedModel& model, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " need a tokenizer, and model '", model.name,
                   "' was loaded without one (no tokenizer.json in its folder); send "
                   "token_ids and stop_token_ids instead"));
}

absl::StatusOr<std::vector<int32_t>> ParsePrompt(const v1::GenerateRequest& request,
                                                 const ServedModel& model) {
  std::vector<int32_t> ids;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("prompt is not set: set text or token_ids");
    case v1::GenerateRequest::kText: {
      if (model.tokenizer == nullptr) return NoTokenizer(model, "text prompts");
      const bool add_special =
          request.has_add_special_tokens() ? request.add_special_tokens() : true;
      ASSIGN_OR_RETURN(ids, model.tokenizer->Encode(request.text(), add_special));
      if (ids.empty()) {
        return absl::InvalidArgumentError("text encodes to no tokens: give a non-empty prompt");
      }
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& given = request.token_ids().ids();
      if (given.empty()) return absl::InvalidArgumentError("token_ids.ids is empty");
      for (int i = 0; i < given.size(); ++i) {
        if (given[i] < 0 || given[i] >= model.vocab_size) {
          return absl::InvalidArgumentError(absl::StrCat("token_ids.ids[", i, "] = ", given[i],
                                                         " is outside the vocabulary [0, ",
                                                         model.vocab_size, ")"));
        }
      }
      ids.assign(given.begin(), given.end());
      break;
    }
  }
  if (static_cast<int64_t>(ids.size()) > model.limits.max_prompt_tokens) {
    return absl::OutOfRangeError(absl::StrCat("the prompt has ", ids.size(),
                                              " tokens; this server accepts at most ",
                                              model.limits.max_prompt_tokens));
  }
  return ids;
}

absl::StatusOr<SamplingParams> ParseSampling(const v1::SamplingParams& s,
                                             const ServedModel& model) {
  SamplingParams p;
  if (s.has_max_tokens()) {
    if (s.max_tokens() < 1 || s.max_tokens() > model.limits.max_new_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens must be in [1, ",
                                                     model.limits.max_new_tokens, "], got ",
                                                     s.max_tokens()));
    }
    p.max_tokens = s.max_tokens();
  }
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_p()) p.top_p = s.top_p();
  p.top_k = s.top_k();
  p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.seed = s.seed();
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.ignore_eos = s.ignore_eos();
  if (s.min_tokens() < 0 || s.min_tokens() > model.limits.max_new_tokens ||
      (s.has_max_tokens() && s.min_tokens() > s.max_tokens())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.min_tokens must be in [0, ", s.has_max_tokens() ? "max_tokens" : "max_new_tokens",
        " = ", s.has_max_tokens() ? s.max_tokens() : model.limits.max_new_tokens, "], got ",
        s.min_tokens()));
  }
  p.min_tokens = s.min_tokens();
  // A default max_tokens makes room for them (the engine may lower it to what fits), as over HTTP.
  if (!s.has_max_tokens()) p.max_tokens = std::max(p.max_tokens, p.min_tokens);
  for (const auto& [token, bias] : s.logit_bias()) p.logit_bias.emplace_back(token, bias);
  std::sort(p.logit_bias.begin(), p.logit_bias.end());  // a map's order is unspecified
  if (s.json_object() && !s.json_schema().empty()) {
    return absl::InvalidArgumentError(
        "sampling.json_object and sampling.json_schema exclude each other");
  }
  if (!s.json_schema().empty()) {
    auto schema = JsonSchema::Parse(s.json_schema());
    if (!schema.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.json_schema: ", schema.status().message()));
    }
    p.json_schema = *std::move(schema);
  }
  if (s.json_object() || p.json_schema != nullptr) {
    const char* field = s.json_object() ? "sampling.json_object" : "sampling.json_schema";
    if (model.json_vocabulary == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, " needs a tokenizer (start the server with --tokenizer DIR)"));
    }
    auto vocabulary = model.json_vocabulary->Get();
    if (!vocabulary.ok()) {
      return absl::Status(vocabulary.status().code(),
                          absl::StrCat(field, ": ", vocabulary.status().message()));
    }
    p.json_output = *std::move(vocabulary);
  }
  // Its messages name the field ("sampling parameter top_p must be in (0, 1], got 2").
  RETURN_IF_ERROR(ValidateSamplingParams(p, static_cast<int32_t>(model.vocab_size)));
  return p;
}

absl::StatusOr<std::optional<SolverOptions>> ParseSolver(const v1::GenerateRequest& request,
                                                         const ServedModel& model) {
  if (!request.has_solver()) return std::optional<SolverOptions>();
  const v1::SolverBudget& b = request.solver();
  SolverOptions o = model.limits.default_solver;
  if (b.has_tolerance()) {
    if (!std::isfinite(b.tolerance()) || b.tolerance() < 0.0f || b.tolerance() > 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("solver.tolerance must be in [0, 1], got ", b.tolerance()));
    }
    o.tolerance = b.tolerance();
  }
  if (b.has_max_iterations()) {
    if (b.max_iterations() < 1 || b.max_iterations() > model.limits.max_solver_iterations) {
      return absl::InvalidArgumentError(absl::StrCat("solver.max_iterations must be in [1, ",
                                                     model.limits.max_solver_iterations, "], got ",
                                                     b.max_iterations()));
    }
    o.max_iterations = b.max_iterations();
  }
  return std::optional<SolverOptions>(o);
}

absl::StatusOr<std::vector<std::string>> ParseStop(const v1::SamplingParams& s,
                                                   const ServedModel& model) {
  std::vector<std::string> stop;
  if (s.stop().empty()) return stop;
  if (model.tokenizer == nullptr) return NoTokenizer(model, "stop strings");
  if (s.stop_size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop has ", s.stop_size(),
                                                   " strings; at most ", kMaxStopStrings,
                                                   " are allowed"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string& str = s.stop(i);
    if (str.empty() || str.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling.stop[", i, "] must be 1 to ", kMaxStopStringBytes, " bytes, got ", str.size()));
    }
    stop.push_back(str);
  }
  return stop;
}

}  // namespace

absl::StatusOr<ParsedGenerateRequest> ParseGenerateRequest(const v1::GenerateRequest& request,
                                                           const ServedModel& model) {
  if (!request.model().empty() && request.model() != model.name) {
    return absl::NotFoundError(absl::StrCat("model '", request.model(),
                                            "' is not served here; this server serves '",
                                            model.name, "' (or leave model empty)"));
  }
  ParsedGenerateRequest parsed;
  ASSIGN_OR_RETURN(parsed.engine.prompt, ParsePrompt(request, model));
  ASSIGN_OR_RETURN(parsed.engine.sampling, ParseSampling(request.sampling(), model));
  parsed.engine.max_tokens_defaulted = !request.sampling().has_max_tokens();
  ASSIGN_OR_RETURN(parsed.stop, ParseStop(request.sampling(), model));
  ASSIGN_OR_RETURN(parsed.engine.solver, ParseSolver(request, model));
  const int32_t top = request.sampling().top_logprobs();
  if (top < 0 || top > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", top));
  }
  parsed.engine.top_logprobs = top;
  parsed.engine.logprobs = request.sampling().logprobs() || top > 0;
  parsed.skip_special_tokens =
      request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_salt must be at most ",
                                                   kMaxCacheSaltBytes, " bytes, got ",
                                                   request.cache_salt().size()));
  }
  parsed.engine.cache_salt = request.cache_salt();
  if (!request.session_id().empty()) {
    RETURN_IF_ERROR(ValidateSessionId(request.session_id()));
    parsed.engine.session_id = request.session_id();
  }
  if (request.has_prompt_logprobs()) {
    const int32_t count = request.prompt_logprobs();
    if (count < 0 || count > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", count));
    }
    if (!request.session_id().empty()) {
      return absl::InvalidArgumentError(
          "prompt_logprobs cannot be combined with session_id: a request that continues a "
          "session does not compute its history");
    }
    parsed.engine.prompt_logprobs = count;
  }
  return parsed;
}

std::optional<SteadyTime> ToSteadyDeadline(std::chrono::system_clock::time_point deadline,
                                           std::chrono::system_clock::time_point system_now,
                                           SteadyTime steady_now) {
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  // Far-future deadlines (gRPC's "infinite" spelled differently) would overflow: clamp to a day.
  const auto remaining =
      std::min<std::chrono::system_clock::duration>(deadline - system_now, std::chrono::hours(24));
  return steady_now + std::chrono::duration_cast<SteadyTime::duration>(remaining);
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_ERROR;
}

void ToProto(const SolverStats& stats, v1::SolverStats* out) {
  out->set_solves(stats.solves);
  out->set_total_iterations(stats.total_iterations);
  out->set_mean_iterations(stats.MeanIterations());
  out->set_max_iterations(stats.max_iterations);
  out->set_capped_fraction(stats.CappedFraction());
  out->set_mean_relative_residual(stats.MeanRelativeResidual());
  out->set_max_relative_residual(stats.max_relative_residual);
}

void ToProto(const RequestUsage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_completion_tokens(usage.completion_tokens);
  ToProto(usage.prefill_solver, out->mutable_prefill());
  ToProto(usage.decode_solver, out->mutable_decode());
  out->set_queue_time_seconds(usage.queue_seconds);
  out->set_time_to_first_token_seconds(usage.time_to_first_token_seconds);
  out->set_total_time_seconds(usage.total_seconds);
  out->set_cached_tokens(usage.cached_tokens);
}

void FillModelInfo(const ServedModel& model, const ModelSpec& spec, const EngineMemory& memory,
                   v1::ModelInfo* out) {
  out->set_name(model.name);
  out->set_architecture(spec.architecture == "mesanet" ? "mesa_net" : spec.architecture);
  out->set_vocab_size(model.vocab_size);
  out->set_hidden_size(spec.hidden_size);
  out->set_num_layers(static_cast<int64_t>(spec.layers.size()));
  const HeadShape heads = FirstLayerHeads(spec);
  out->set_num_heads(heads.heads);
  out->set_head_dim(heads.head_dim);
  out->set_parameter_count(spec.ParameterCount());
  out->set_state_bytes(memory.state_bytes_per_slot);
  if (spec.bos_token_id >= 0) out->set_bos_token_id(static_cast<int32_t>(spec.bos_token_id));
  if (!spec.eos_token_ids.empty()) {
    out->set_eos_token_id(static_cast<int32_t>(spec.eos_token_ids[0]));
  }
  for (int64_t id : spec.eos_token_ids) out->add_eos_token_ids(static_cast<int32_t>(id));
  out->set_layer_pattern(spec.LayerPattern());
  out->set_kv_bytes_per_token(memory.kv_bytes_per_token);
  out->set_kv_block_size(memory.kv_block_size);
  out->set_kv_blocks_total(memory.kv_blocks_total);
  out->set_has_tokenizer(model.tokenizer != nullptr);
  out->mutable_default_solver()->set_tolerance(model.limits.default_solver.tolerance);
  out->mutable_default_solver()->set_max_iterations(model.limits.default_solver.max_iterations);
  out->set_max_solver_iterations(model.limits.max_solver_iterations);
  out->set_max_prompt_tokens(model.limits.max_prompt_tokens);
  out->set_max_new_tokens(model.limits.max_new_tokens);
  out->set_max_slots(model.limits.max_slots);
  out->set_max_waiting(model.limits.max_waiting);
}

namespace {

// Stop strings need text: the request validation refuses them without a tokenizer.
std::vector<std::string> CheckedStops(const Tokenizer* tokenizer, std::vector<std::string> stop) {
  RIDGE_CHECK(tokenizer != nullptr || stop.empty());
  return stop;
}

void ToProto(const LogprobEntry& lp, v1::TokenLogprob* p) {
  p->set_token_id(lp.token);
  p->set_logprob(lp.logprob);
  p->set_rank(lp.rank);
  for (const auto& [token, logprob] : lp.top) {
    v1::TopLogprob* t = p->add_top();
    t->set_token_id(token);
    t->set_logprob(logprob);
  }
}

void AppendDelta(const OutputDelta& delta, v1::GenerateResponse* out) {
  for (size_t i = 0; i < delta.tokens.size(); ++i) {
    out->add_token_ids(delta.tokens[i]);
    if (i < delta.logprobs.size()) ToProto(delta.logprobs[i], out->add_logprobs());
  }
  out->mutable_text()->append(delta.text);
}

}  // namespace

GrpcResponseBuilder::GrpcResponseBuilder(const Tokenizer* tokenizer, bool skip_special_tokens,
                                         std::vector<std::string> stop, int32_t min_tokens)
    : assembler_(tokenizer, CheckedStops(tokenizer, std::move(stop)), skip_special_tokens,
                 min_tokens) {}

bool GrpcResponseBuilder::AddTokens(const RequestEvent& event, v1::GenerateResponse* out) {
  for (const LogprobEntry& lp : event.prompt_logprobs) ToProto(lp, out->add_prompt_logprobs());
  if (assembler_.stopped()) return false;
  absl::StatusOr<OutputDelta> delta = assembler_.Add(event);
  if (!delta.ok()) {
    Log(LogLevel::kWarning, "request ", event.id,
        ": cannot decode output: ", delta.status().ToString());
    return false;
  }
  AppendDelta(*delta, out);
  return assembler_.stopped();
}

absl::Status GrpcResponseBuilder::Finish(const RequestEvent& event, v1::GenerateResponse* out) {
  if (!assembler_.stopped()) {
    absl::StatusOr<OutputDelta> rest = assembler_.Finish();
    if (rest.ok()) AppendDelta(*rest, out);
  }
  ToProto(event.usage, out->mutable_usage());
  if (assembler_.stopped()) {
    // The engine saw a cancellation (ours); the client sees the stop it asked for.
    out->set_finish_reason(v1::FINISH_REASON_STOP);
    out->set_finish_message(assembler_.matched_stop());
    return absl::OkStatus();
  }
  out->set_finish_reason(ToProto(event.finish_reason));
  if (!event.status.ok()) out->set_finish_message(std::string(event.status.message()));
  switch (event.finish_reason) {
    case FinishReason::kError:
      return event.status.ok() ? absl::InternalError("generation failed") : event.status;
    case FinishReason::kCancelled:
      if (event.status.code() == absl::StatusCode::kDeadlineExceeded) return event.status;
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

}  // namespace ridge
