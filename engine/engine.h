// The serving engine: one scheduler thread that owns every request and state slot. Transports
// only Submit and Cancel (thread-safe, non-blocking) and receive events through their sink.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cached_memory.h"
#include "engine/engine_observer.h"
#include "engine/event_delivery.h"
#include "engine/request.h"
#include "models/model.h"
#include "models/model_backend.h"
#include "sampling/sampler.h"

namespace ridge {

// The most prompt rows a step scores for prompt logprobs (EngineRequest::prompt_logprobs): each
// takes a row of logits on the device, so as many as 1 GiB of them holds, at most 2048 (1,766 at
// a 152K vocabulary).
int64_t MaxScoredRowsPerStep(int64_t vocab_size);

struct EngineOptions {
  int64_t max_slots = 64;  // sequences decoding at once (state pool size)
  // KV blocks of the CPU backend that Create(const Model*) builds, for models with attention
  // layers; 0 gives each slot room for kDefaultContextTokens (engine/memory_plan.h), as serve
  // does. (A backend passed in brings its own pool.)
  int64_t cpu_kv_blocks = 0;
  // Snapshots the prefix cache keeps at most: state slots beside max_slots (and, with attention
  // layers, references to KV blocks, given back when sequences need them); 0 turns it off.
  int64_t prefix_cache_slots = 0;
  int64_t max_waiting = 256;            // queued requests beyond the slots; more -> rejected
  int64_t prefill_token_budget = 512;   // prompt tokens per step, so decode is never stalled
  int64_t max_prompt_tokens = 1 << 20;  // longer prompts are rejected
  int64_t max_new_tokens = 1 << 16;     // cap on sampling.max_tokens
  SolverOptions default_solver{0.0f, 30};
  int32_t max_solver_iterations = 100;  // the most a request may ask for
  // Saved sessions (they live in the prefix cache, pinned): at most this many, and where
  // SaveSessionToDisk and LoadSessionFromDisk keep their files (empty: in memory only).
  // model_fingerprint names the weights a saved file belongs to (empty: one of the spec's shape).
  int64_t max_sessions = 0;  // 0: half of prefix_cache_slots
  std::string session_dir = {};
  std::string model_fingerprint = {};
  // Called once, on the engine thread, when a step failed and the backend reports that it can
  // never step again (ModelBackend::Health): every request has then been failed with that error
  // and new ones are refused with it; the server should stop.
  std::function<void(const absl::Status&)> on_backend_failure = nullptr;
};

struct SessionInfo {
  std::string id;
  int64_t tokens = 0;     // its history: what the state consumed and the answer's last token
  bool in_use = false;    // a request is continuing it
  std::string path = {};  // its file, for the disk operations
};

absl::Status ValidateEngineOptions(const EngineOptions& options);

// What one sequence's memory costs (the backend's layout and pool sizes).
struct EngineMemory {
  int64_t state_bytes_per_slot = 0;
  int64_t kv_bytes_per_token = 0;  // 0 without attention layers
  int64_t kv_block_size = 0;
  int64_t kv_blocks_total = 0;
};

struct EngineSnapshot {
  int64_t running = 0, waiting = 0, slots_used = 0, slots_total = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t prefix_snapshots = 0;
  int64_t prefix_cache_bytes = 0;  // its states and the KV blocks only it holds
  bool draining = false;
  std::string backend_failure;  // why the backend can no longer step (empty while it can)
};

class Engine {
 public:
  // Starts the scheduler thread on a CPU backend with options.max_slots states, and
  // options.prefix_cache_slots more for the prefix cache (and
  // options.cpu_kv_blocks KV blocks). `model` and `observer` (may be null) must outlive the
  // engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Model* model,
                                                        const EngineOptions& options,
                                                        EngineObserver* observer);
  // Same on any backend; it must have at least options.max_slots + options.prefix_cache_slots
  // slots and outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(ModelBackend* backend,
                                                        const EngineOptions& options,
                                                        EngineObserver* observer);
  ~Engine();  // cancels everything still running and joins the thread

  // Validates and queues a request. Errors: kInvalidArgument (bad field, named),
  // kOutOfRange (prompt too long, or prompt plus max_tokens more than the model's context or
  // than the whole KV cache holds),
  // kResourceExhausted (queue full), kUnavailable (draining).
  absl::StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestSink> sink);
  // The request finishes within one step: kCancelled (status Cancelled, or Unavailable for
  // kShutdown), or kStop for kStopString. Unknown or
  // finished ids are ignored.
  void Cancel(RequestId id, CancelReason reason = CancelReason::kClient);
  // Stop admitting new requests; running and queued ones go on.
  void StartDrain();
  // Blocks until nothing is running or waiting and every finished request's events have reached
  // its sink, or the deadline passes; true when idle.
  bool WaitIdle(SteadyTime deadline);

  EngineSnapshot Snapshot() const;

  // Saved sessions (engine_sessions.cc). Each call waits for the engine thread (a step at
  // most). Errors: kNotFound (no such session or file), kFailedPrecondition (in use by a
  // request, no --session-dir, a file of another model or backend), kDataLoss (a damaged
  // file), kResourceExhausted (no room), kInvalidArgument (a bad id).
  std::vector<SessionInfo> ListSessions();
  absl::Status DeleteSession(const std::string& id);
  absl::StatusOr<SessionInfo> SaveSessionToDisk(const std::string& id);
  absl::StatusOr<SessionInfo> LoadSessionFromDisk(const std::string& id);
  const ModelSpec& spec() const { return backend_->spec(); }
  EngineMemory memory() const;
  const EngineOptions& options() const { return options_; }

 private:
  struct Sequence;
  Engine(ModelBackend* backend, std::unique_ptr<ModelBackend> owned_backend,
         const EngineOptions& options, EngineObserver* observer);
  absl::Status Validate(const EngineRequest& request) const;
  // A defaulted max_tokens lowered to what the context and the KV cache hold beside the prompt.
  void FitDefaultMaxTokens(EngineRequest& request) const;
  void Loop();
  // One scheduling step on the engine thread, without the lock held.
  using CancelList = std::vector<std::pair<RequestId, CancelReason>>;
  void RunStep(std::vector<std::unique_ptr<Sequence>> arrived, CancelList cancels);
  void CancelOrExpire(CancelList cancels);
  // After a failed step: when the backend reports that it can never step again, fails every
  // request, refuses new ones and tells options_.on_backend_failure.
  void CheckBackendHealth();
  // Finishes every arrived, waiting and running request with backend_failure_.
  void FailEverything(std::vector<std::unique_ptr<Sequence>> arrived);
  // Appends the picked token (with its logprobs when the request asked) and sends it; false
  // when the sequence is finished.
  bool Advance(Sequence& seq, PickedToken picked, SteadyTime now);
  void Finish(Sequence& seq, FinishReason reason, absl::Status status);
  // Gives back the slot and blocks of every planned victim and puts it back at the front of the
  // queue (oldest first), to be recomputed from its tokens.
  void Preempt(const std::vector<RequestId>& victims);
  void PublishSnapshot();
  // The prefix cache (engine_prefix_cache.cc). Looks up the hits of the waiting requests that
  // may be admitted this step; the plan counts their blocks as free (evictable). Then the hits of
  // the `admitted` first waiting requests are locked until UnlockHits, so admitting one does not
  // evict another's.
  void FindCachedPrefixes();
  void LockAdmittedHits(size_t admitted);
  void UnlockHits();
  // Puts an admitted sequence's memory at its start: its cache hit restored, or a reset slot.
  absl::Status StartSequence(Sequence& seq, StepReport& report);
  // Keeps the state of a sequence that has just finished its prompt, or reached one of its
  // snapshot points.
  void SnapshotPrompt(Sequence& seq);
  // Prompt tokens a sequence may process before its next snapshot point (or its prompt's end),
  // and whether it stands at one.
  int64_t TokensToNextSnapshot(const Sequence& seq) const;
  bool AtSnapshotPoint(const Sequence& seq) const;
  // Gives back a finished sequence's memory, the prefix cache keeping its state when it ended
  // normally.
  void ReleaseFinished(Sequence& seq, FinishReason reason);
  // Sessions (engine_sessions.cc): an arriving request that names one takes it (its tokens go
  // before the prompt); false when it was finished with an error instead.
  bool JoinSession(Sequence& seq);
  // A finished request's session: its final state saved (ended normally) or let go.
  void LeaveSession(Sequence& seq, bool ended_normally);
  int64_t SessionLimit() const;
  // Runs `work` on the engine thread between steps and waits for it; Unavailable once the
  // engine's loop has ended.
  absl::Status RunOnEngineThread(std::function<void()> work);
  // False (the request finished with an error) when its prompt and max_tokens need more KV
  // blocks than saved sessions leave.
  bool FitsBesideSessions(Sequence& seq);
  int64_t MaxSessionFileBytes() const;
  std::string FingerprintOrSpec() const;
  struct Session {
    PrefixCache::Node* node = nullptr;  // null while its first request runs
    std::vector<int32_t> tokens = {};   // those its state has consumed
    std::vector<int32_t> pending = {};  // generated after them, not yet fed (the last pick)
    std::string space = {};
    bool in_use = false;
    // Why its last turn's state could not be kept (empty: it was): the next request that names
    // it is refused with this, rather than silently continuing an older state.
    std::string lost = {};
  };
  // Posts the step's events to the delivery thread once its metrics are recorded, so a client
  // that has its answer and then scrapes /metrics sees the step that produced it.
  void DeliverEvents();

  ModelBackend* backend_;
  std::unique_ptr<ModelBackend> owned_backend_;
  EngineOptions options_;
  EngineObserver* observer_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  bool stopping_ = false;
  bool draining_ = false;
  absl::Status backend_failure_;  // set once, on the engine thread, under mutex_
  bool step_in_flight_ = false;
  bool loop_done_ = false;  // the loop has run its last commands: RunOnEngineThread refuses  // the
                            // loop took a step's work and has not posted its events
  RequestId next_id_ = 1;
  std::vector<std::unique_ptr<Sequence>> incoming_;  // submitted, not yet seen by the loop
  CancelList cancels_;
  int64_t queued_ = 0;  // submitted and not yet holding a slot (incoming_ + waiting_)
  EngineSnapshot snapshot_;

  // Owned by the scheduler thread.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  CachedMemory memory_;
  std::vector<PrefixCache::Node*> locked_hits_;  // during a step: FindCachedPrefixes' locks
  std::map<std::string, Session> sessions_;
  std::vector<std::function<void()>> commands_;  // guarded by mutex_
  int64_t evictions_reported_ = 0;
  EventDelivery::Events outbox_;  // this step's events, posted to delivery_ at its end
  std::unique_ptr<EventDelivery> delivery_ = std::make_unique<EventDelivery>();
  std::thread thread_;
};

}  // namespace ridge
