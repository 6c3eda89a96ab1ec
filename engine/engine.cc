#include "engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "engine/engine_sequence.h"
#include "engine/memory_plan.h"
#include "engine/scheduler_policy.h"
#include "kernels/threading.h"
#include "models/cpu_backend.h"

namespace ridge {
namespace {

double Seconds(SteadyTime from, SteadyTime to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

int64_t MaxScoredRowsPerStep(int64_t vocab_size) {
  constexpr int64_t kLogitBytes = int64_t{1} << 30, kMostRows = 2048;
  return std::clamp<int64_t>(
      kLogitBytes / (static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(vocab_size, 1)), 1,
      kMostRows);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model* model,
                                                       const EngineOptions& options,
                                                       EngineObserver* observer) {
  RETURN_IF_ERROR(ValidateEngineOptions(options));
  const KvLayout& kv = model->decoder().kv_layout();
  const int64_t blocks = options.cpu_kv_blocks > 0
                             ? options.cpu_kv_blocks
                             : options.max_slots * kv.BlocksFor(kDefaultContextTokens);
  auto backend = std::make_unique<CpuBackend>(
      &model->decoder(), options.max_slots + options.prefix_cache_slots, blocks);
  ModelBackend* raw = backend.get();
  std::unique_ptr<Engine> engine(new Engine(raw, std::move(backend), options, observer));
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(ModelBackend* backend,
                                                       const EngineOptions& options,
                                                       EngineObserver* observer) {
  RETURN_IF_ERROR(ValidateEngineOptions(options));
  if (backend->num_slots() < options.max_slots + options.prefix_cache_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", std::string(backend->name()), " backend has ", backend->num_slots(),
                     " state slots, fewer than ", options.max_slots, " for sequences and ",
                     options.prefix_cache_slots, " for the prefix cache"));
  }
  std::unique_ptr<Engine> engine(new Engine(backend, nullptr, options, observer));
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(ModelBackend* backend, std::unique_ptr<ModelBackend> owned_backend,
               const EngineOptions& options, EngineObserver* observer)
    : backend_(backend),
      owned_backend_(std::move(owned_backend)),
      options_(options),
      observer_(observer),
      memory_(backend, options.max_slots, options.prefix_cache_slots) {
  snapshot_.slots_total = options.max_slots;
  snapshot_.kv_blocks_total = memory_.pools().blocks().total();
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  delivery_.reset();  // delivers the cancellations the loop posted last
}

absl::StatusOr<RequestId> Engine::Submit(EngineRequest request, std::shared_ptr<RequestSink> sink) {
  if (request.max_tokens_defaulted) FitDefaultMaxTokens(request);
  RIDGE_CHECK(sink != nullptr);
  absl::Status status = Validate(request);
  absl::StatusOr<Sampler> sampler = absl::UnknownError("unset");
  if (status.ok()) {
    sampler = Sampler::Create(request.sampling, static_cast<int32_t>(backend_->spec().vocab_size),
                              OutputEndTokens(backend_->spec().eos_token_ids, request.sampling));
    status = sampler.status();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (status.ok() && !backend_failure_.ok()) status = backend_failure_;
  if (status.ok() && (draining_ || stopping_)) {
    status = absl::UnavailableError("the server is shutting down and accepts no new requests");
  }
  if (status.ok() && queued_ >= options_.max_waiting) {
    status = absl::ResourceExhaustedError(absl::StrCat("the queue is full: ", queued_,
                                                       " requests are waiting for one of ",
                                                       options_.max_slots, " slots; retry later"));
  }
  if (!status.ok()) {
    lock.unlock();
    if (observer_ != nullptr) observer_->OnRejected(status);
    return status;
  }
  auto seq = std::make_unique<Sequence>(std::move(*sampler));
  seq->id = next_id_++;
  seq->solver = request.solver.value_or(options_.default_solver);
  seq->request = std::move(request);
  seq->sink = std::move(sink);
  seq->submitted = std::chrono::steady_clock::now();
  seq->usage.prompt_tokens = static_cast<int64_t>(seq->request.prompt.size());
  seq->feed = seq->request.prompt;
  seq->cache_space = PrefixCacheSpace(seq->request.cache_salt, seq->solver);
  const RequestId id = seq->id;
  incoming_.push_back(std::move(seq));
  ++queued_;
  snapshot_.waiting = queued_;
  lock.unlock();
  wake_.notify_one();
  return id;
}

void Engine::Cancel(RequestId id, CancelReason reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.emplace_back(id, reason);
  }
  wake_.notify_one();
}

void Engine::StartDrain() {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
  snapshot_.draining = true;
}

bool Engine::WaitIdle(SteadyTime deadline) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool idle = idle_.wait_until(lock, deadline, [&] {
      return snapshot_.running == 0 && queued_ == 0 && incoming_.empty() && !step_in_flight_;
    });
    if (!idle) return false;
  }
  return delivery_->Flush(deadline);  // the finished requests' last events reach their sinks
}

EngineMemory Engine::memory() const {
  const KvLayout& kv = backend_->kv_layout();
  return {.state_bytes_per_slot = backend_->state_bytes_per_slot(),
          .kv_bytes_per_token = kv.bytes_per_token(),
          .kv_block_size = kv.empty() ? 0 : kv.block_size,
          .kv_blocks_total = backend_->num_kv_blocks()};
}

EngineSnapshot Engine::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return snapshot_;
}

void Engine::Loop() {
  AdoptComputeThreads();  // --threads, set on the thread that started the engine
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] {
      return stopping_ || !incoming_.empty() || !cancels_.empty() || !running_.empty() ||
             !waiting_.empty() || !commands_.empty();
    });
    if (stopping_) break;
    if (!commands_.empty()) {
      std::vector<std::function<void()>> commands = std::exchange(commands_, {});
      lock.unlock();
      for (auto& command : commands) command();
      lock.lock();
      continue;
    }
    std::vector<std::unique_ptr<Sequence>> arrived = std::move(incoming_);
    CancelList cancels = std::move(cancels_);
    incoming_.clear();
    cancels_.clear();
    step_in_flight_ = true;  // until DeliverEvents has posted the step's events
    lock.unlock();
    RunStep(std::move(arrived), std::move(cancels));
    lock.lock();
  }
  lock.unlock();
  // Shutting down: whatever is left ends as cancelled.
  for (auto& seq : incoming_) waiting_.push_back(std::move(seq));
  incoming_.clear();
  const absl::Status down = absl::CancelledError("the server is shutting down");
  for (auto& seq : running_) Finish(*seq, FinishReason::kCancelled, down);
  for (auto& seq : waiting_) Finish(*seq, FinishReason::kCancelled, down);
  DeliverEvents();
  // Session calls that arrived meanwhile still get their answer.
  std::vector<std::function<void()>> commands;
  {
    std::lock_guard<std::mutex> relock(mutex_);
    commands = std::exchange(commands_, {});
    loop_done_ = true;  // later calls are refused instead of waiting for ever
  }
  for (auto& command : commands) command();
}

void Engine::Preempt(const std::vector<RequestId>& victims) {
  // Victims come newest first; pushing each to the front leaves the oldest first.
  for (RequestId id : victims) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const std::unique_ptr<Sequence>& s) { return s->id == id; });
    RIDGE_CHECK(it != running_.end());
    std::unique_ptr<Sequence> seq = std::move(*it);
    running_.erase(it);
    memory_.Release(seq->memory);
    seq->hit = {};
    seq->hit_generation = ~uint64_t{0};
    seq->feed = seq->request.prompt;
    seq->feed.insert(seq->feed.end(), seq->generated.begin(), seq->generated.end());
    seq->prompt_done = 0;
    seq->position = 0;
    if (!seq->prompt_scores_sent) seq->prompt_scores.clear();  // scored again as recomputed
    Log(LogLevel::kDebug, "request ", seq->id, ": preempted for KV blocks after ",
        seq->generated.size(), " tokens; it will be recomputed");
    waiting_.push_front(std::move(seq));
  }
  if (!victims.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_ += static_cast<int64_t>(victims.size());
  }
}

void Engine::Finish(Sequence& seq, FinishReason reason, absl::Status status) {
  const SteadyTime now = std::chrono::steady_clock::now();
  ReleaseFinished(seq, reason);
  seq.usage.completion_tokens = static_cast<int64_t>(seq.generated.size());
  seq.usage.total_seconds = Seconds(seq.submitted, now);
  RequestEvent& event = seq.pending;
  event.id = seq.id;
  event.finished = true;
  event.finish_reason = reason;
  event.status = std::move(status);
  event.usage = seq.usage;
  if (observer_ != nullptr) observer_->OnRequestFinished(reason, event.status, seq.usage);
  outbox_.emplace_back(seq.sink, std::move(event));
  seq.pending = RequestEvent{};
}

void Engine::CancelOrExpire(CancelList cancels) {
  const SteadyTime now = std::chrono::steady_clock::now();
  struct Verdict {
    bool ends = false;
    FinishReason reason = FinishReason::kCancelled;
    absl::Status status;
  };
  auto verdict = [&](const Sequence& seq) -> Verdict {
    for (const auto& [id, why] : cancels) {
      if (id != seq.id) continue;
      if (why == CancelReason::kStopString) return {true, FinishReason::kStop, absl::OkStatus()};
      if (why == CancelReason::kShutdown) {
        return {true, FinishReason::kCancelled,
                absl::UnavailableError("the server is shutting down: its drain time ran out "
                                       "before this request finished")};
      }
      return {true, FinishReason::kCancelled, absl::CancelledError("cancelled by the client")};
    }
    if (seq.request.deadline.has_value() && *seq.request.deadline <= now) {
      return {true, FinishReason::kCancelled,
              absl::DeadlineExceededError("the request's deadline passed")};
    }
    return {};
  };
  auto sweep = [&](auto& container, bool counts_as_queued) {
    for (auto it = container.begin(); it != container.end();) {
      Verdict v = verdict(**it);
      if (!v.ends) {
        ++it;
        continue;
      }
      Finish(**it, v.reason, std::move(v.status));
      if (counts_as_queued) {
        std::lock_guard<std::mutex> lock(mutex_);
        --queued_;
      }
      it = container.erase(it);
    }
  };
  sweep(waiting_, true);
  sweep(running_, false);
}

bool Engine::Advance(Sequence& seq, PickedToken picked, SteadyTime now) {
  const int32_t token = picked.token;
  if (!seq.has_token) {
    seq.usage.time_to_first_token_seconds = Seconds(seq.submitted, now);
    seq.has_token = true;
  } else if (observer_ != nullptr) {
    observer_->OnInterTokenLatency(Seconds(seq.last_token, now));
  }
  seq.last_token = now;
  const SamplingParams& p = seq.request.sampling;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
      p.stop_token_ids.end()) {
    seq.final_token = token;
    Finish(seq, FinishReason::kStop, absl::OkStatus());
    return false;
  }
  if (!p.ignore_eos && backend_->spec().IsEos(token)) {
    seq.final_token = token;
    Finish(seq, FinishReason::kEos, absl::OkStatus());
    return false;
  }
  seq.generated.push_back(token);
  seq.next_token = token;
  seq.pending.tokens.push_back(token);
  if (seq.wants_logprobs()) {
    seq.pending.logprobs.push_back({token, picked.logprob, std::move(picked.top)});
  }
  if (static_cast<int32_t>(seq.generated.size()) >= p.max_tokens) {
    Finish(seq, FinishReason::kLength, absl::OkStatus());
    return false;
  }
  seq.pending.id = seq.id;
  outbox_.emplace_back(seq.sink, std::move(seq.pending));
  seq.pending = RequestEvent{};
  return true;
}

void Engine::RunStep(std::vector<std::unique_ptr<Sequence>> arrived, CancelList cancels) {
  if (!backend_failure_.ok()) {  // those submitted while the failing step ran
    FailEverything(std::move(arrived));
    PublishSnapshot();
    DeliverEvents();
    return;
  }
  for (auto& seq : arrived) {
    if (JoinSession(*seq) && FitsBesideSessions(*seq)) {
      waiting_.push_back(std::move(seq));
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);  // finished with an error instead
    --queued_;
  }
  CancelOrExpire(std::move(cancels));
  FindCachedPrefixes();

  std::vector<RunningSequenceInfo> running_info;
  for (const auto& seq : running_) {
    running_info.push_back(
        {.id = seq->id,
         .prompt_tokens_left = static_cast<int64_t>(seq->feed.size()) - seq->prompt_done,
         .position = seq->position,
         .table_blocks = seq->memory.blocks.size()});
  }
  std::vector<WaitingRequestInfo> waiting_info;
  const KvLayout& kv = backend_->kv_layout();
  for (const auto& seq : waiting_) {
    const bool hit = seq->hit.node != nullptr && seq->hit_generation == memory_.generation();
    const int64_t cached = hit ? seq->hit.position : 0;
    waiting_info.push_back({.id = seq->id,
                            .prompt_tokens = static_cast<int64_t>(seq->feed.size()) - cached,
                            .position = cached,
                            .table_blocks = kv.empty() ? 0 : cached / kv.block_size});
  }
  const StepPlan plan = PlanStep(running_info, waiting_info,
                                 {.free_slots = memory_.FreeRunningSlots(),
                                  .free_blocks = memory_.FreeBlocks(),
                                  .prefill_tokens = options_.prefill_token_budget},
                                 {.block_size = kv.empty() ? 0 : kv.block_size});
  Preempt(plan.preempt);

  LockAdmittedHits(plan.admit.size());
  const SteadyTime step_start = std::chrono::steady_clock::now();
  StepReport report;
  std::vector<RequestId> failed_admissions;  // finished at once: the plan must skip them
  for (size_t i = 0; i < plan.admit.size(); ++i) {
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    RIDGE_CHECK(seq->id == plan.admit[i] && memory_.TakeSlot(seq->memory));
    if (const absl::Status start = StartSequence(*seq, report); !start.ok()) {
      Log(LogLevel::kError, "request ", seq->id, ": state reset failed: ", start.ToString());
      Finish(*seq, FinishReason::kError, absl::InternalError(start.ToString()));
      failed_admissions.push_back(seq->id);
      continue;
    }
    // A recomputed (preempted) sequence keeps the queue time of its first admission.
    if (seq->usage.queue_seconds == 0.0) {
      seq->usage.queue_seconds = Seconds(seq->submitted, step_start);
    }
    running_.push_back(std::move(seq));
  }
  if (!plan.admit.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_ -= static_cast<int64_t>(plan.admit.size());
  }
  UnlockHits();

  // One forward call for the prompt chunks and the decode tokens of this step.
  auto find = [&](RequestId id) -> Sequence* {
    for (auto& seq : running_) {
      if (seq->id == id) return seq.get();
    }
    RIDGE_CHECK(std::find(failed_admissions.begin(), failed_admissions.end(), id) !=
                failed_admissions.end());
    return nullptr;
  };
  std::vector<Sequence*> members;
  std::vector<SlotChunk> chunks;
  // The blocks the plan counted for each piece. Snapshots that share a preempted sequence's
  // blocks can make the count too high; a piece that finds too few waits for a later step.
  auto take_blocks = [&](Sequence& seq, int64_t tokens) {
    if (memory_.Grow(seq.memory, seq.position + tokens)) return true;
    Log(LogLevel::kDebug, "request ", seq.id, ": no KV block free this step; it waits");
    return false;
  };
  std::vector<SolverStats> step_stats(plan.prefill.size() + plan.decode.size());
  int64_t scored_rows_left = MaxScoredRowsPerStep(backend_->spec().vocab_size);
  for (const auto& [id, planned] : plan.prefill) {
    Sequence* found = find(id);
    if (found == nullptr) continue;
    Sequence& seq = *found;
    // A hit that could not be restored starts from scratch: its piece is still within the
    // prompt.
    int64_t n = std::min(planned, TokensToNextSnapshot(seq));
    if (seq.scores_prompt()) {
      n = std::min(n, scored_rows_left);
      scored_rows_left -= seq.PromptRowsToScore(n);
    }
    if (n <= 0 || !take_blocks(seq, n)) continue;
    chunks.push_back({seq.memory.slot,
                      std::span<const int32_t>(seq.feed).subspan(seq.prompt_done, n), seq.solver,
                      &step_stats[chunks.size()], SolvePhase::kPrefill,
                      seq.memory.blocks.entries()});
    members.push_back(&seq);
    report.prefill_tokens += n;
  }
  for (RequestId id : plan.decode) {
    Sequence* found = find(id);
    if (found == nullptr || !take_blocks(*found, 1)) continue;
    Sequence& seq = *found;
    chunks.push_back({seq.memory.slot,
                      {&seq.next_token, 1},
                      seq.solver,
                      &step_stats[chunks.size()],
                      SolvePhase::kDecode,
                      seq.memory.blocks.entries()});
    members.push_back(&seq);
  }
  report.preemptions = static_cast<int64_t>(plan.preempt.size());
  report.prefill_sequences = static_cast<int64_t>(plan.prefill.size());
  report.decode_sequences = static_cast<int64_t>(plan.decode.size());

  if (!chunks.empty()) {
    // Each sequence that ends its prompt or decodes gets a token pick (when all of them are
    // greedy without logprobs the backend only takes an argmax: ForwardPick).
    std::vector<TokenPick> picks(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      Sequence& seq = *members[i];
      const int64_t done = seq.prompt_done + (chunks[i].phase == SolvePhase::kPrefill
                                                  ? static_cast<int64_t>(chunks[i].tokens.size())
                                                  : 0);
      if (chunks[i].phase == SolvePhase::kPrefill && seq.scores_prompt()) {
        const int64_t rows = seq.PromptRowsToScore(static_cast<int64_t>(chunks[i].tokens.size()));
        picks[i].score_next =
            std::span<const int32_t>(seq.request.prompt).subspan(seq.prompt_done + 1, rows);
        picks[i].score_top_logprobs = seq.request.prompt_logprobs;
      }
      if (done < static_cast<int64_t>(seq.feed.size())) continue;  // no token yet
      picks[i].sampler = &seq.sampler;
      picks[i].uniform = seq.sampler.NextDrawUniform();
      picks[i].prompt = seq.request.prompt;
      picks[i].generated = seq.generated;
      picks[i].logprobs = seq.wants_logprobs();
      picks[i].top_logprobs = seq.request.top_logprobs;
    }
    std::vector<PickedToken> picked;
    const absl::Status status = backend_->ForwardPick(chunks, picks, &picked);
    const SteadyTime now = std::chrono::steady_clock::now();
    report.seconds = Seconds(step_start, now);
    std::vector<RequestId> finished;
    for (size_t i = 0; i < chunks.size(); ++i) {
      Sequence& seq = *members[i];
      const bool prefill = chunks[i].phase == SolvePhase::kPrefill;
      (prefill ? seq.usage.prefill_solver : seq.usage.decode_solver).Merge(step_stats[i]);
      (prefill ? report.prefill_solver : report.decode_solver).Merge(step_stats[i]);
      if (!status.ok()) {
        Log(LogLevel::kError, "request ", seq.id, ": model step failed: ", status.ToString());
        Finish(seq, FinishReason::kError, absl::InternalError(status.ToString()));
        finished.push_back(seq.id);
        continue;
      }
      seq.position += static_cast<int64_t>(chunks[i].tokens.size());
      if (prefill) {
        for (PickedToken& row : picked[i].scored) {
          seq.prompt_scores.push_back({row.token, row.logprob, std::move(row.top), row.rank});
        }
        seq.prompt_done += static_cast<int64_t>(chunks[i].tokens.size());
        if (seq.prompt_done < static_cast<int64_t>(seq.feed.size())) {
          if (AtSnapshotPoint(seq)) SnapshotPrompt(seq);
          continue;
        }
        SnapshotPrompt(seq);
        if (seq.scores_prompt()) {  // the first event carries them
          seq.pending.prompt_logprobs = std::move(seq.prompt_scores);
          seq.prompt_scores.clear();
          seq.prompt_scores_sent = true;
        }
      }
      if (!Advance(seq, std::move(picked[i]), now)) finished.push_back(seq.id);
    }
    std::erase_if(running_, [&](const std::unique_ptr<Sequence>& seq) {
      return std::find(finished.begin(), finished.end(), seq->id) != finished.end();
    });
    if (!status.ok()) CheckBackendHealth();
  }
  PublishSnapshot();
  if (observer_ != nullptr && (!chunks.empty() || report.preemptions > 0)) {
    const EngineSnapshot snap = Snapshot();
    report.running = snap.running;
    report.waiting = snap.waiting;
    report.slots_used = snap.slots_used;
    report.slots_total = snap.slots_total;
    report.kv_blocks_used = snap.kv_blocks_used;
    report.kv_blocks_total = snap.kv_blocks_total;
    report.prefix_snapshots = snap.prefix_snapshots;
    report.prefix_snapshot_bytes = snap.prefix_cache_bytes;
    report.prefix_evictions = memory_.evictions() - evictions_reported_;
    evictions_reported_ = memory_.evictions();
    observer_->OnStep(report);
  }
  DeliverEvents();
}

void Engine::CheckBackendHealth() {
  const absl::Status health = backend_->Health();
  if (health.ok()) return;
  const absl::Status failure = absl::UnavailableError(absl::StrCat(
      "the model backend can no longer run (", health.message(), "); the server must restart"));
  Log(LogLevel::kError, failure.message());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    backend_failure_ = failure;
    draining_ = true;
  }
  FailEverything({});
  if (options_.on_backend_failure) options_.on_backend_failure(failure);
}

void Engine::FailEverything(std::vector<std::unique_ptr<Sequence>> arrived) {
  const int64_t dequeued = static_cast<int64_t>(arrived.size() + waiting_.size());
  for (auto& seq : arrived) Finish(*seq, FinishReason::kError, backend_failure_);
  for (auto& seq : waiting_) Finish(*seq, FinishReason::kError, backend_failure_);
  for (auto& seq : running_) Finish(*seq, FinishReason::kError, backend_failure_);
  waiting_.clear();
  running_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  queued_ -= dequeued;
}

void Engine::DeliverEvents() {
  delivery_->Post(outbox_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_in_flight_ = false;
  }
  idle_.notify_all();
}

void Engine::PublishSnapshot() {
  // Blocks only the prefix cache holds are given back on demand: they count as free.
  const int64_t blocks_free = memory_.FreeBlocks();
  const int64_t cache_only_blocks = blocks_free - memory_.pools().blocks().free();
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_.running = static_cast<int64_t>(running_.size());
  snapshot_.waiting = queued_;
  snapshot_.slots_used = options_.max_slots - memory_.FreeRunningSlots();
  snapshot_.kv_blocks_used = memory_.pools().blocks().total() - blocks_free;
  snapshot_.prefix_snapshots = memory_.snapshots();
  snapshot_.prefix_cache_bytes = memory_.snapshots() * backend_->state_bytes_per_slot() +
                                 cache_only_blocks * backend_->kv_layout().bytes_per_block();
  snapshot_.draining = draining_;
  snapshot_.backend_failure = std::string(backend_failure_.message());
}

}  // namespace ridge
