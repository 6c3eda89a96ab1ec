// Saved sessions: a request that names a session continues its state and, when it ends
// normally, leaves its own final state there (pinned in the prefix cache); sessions can be
// listed and deleted, written to a file and read back (engine/session_file.h), also after a
// restart. Files carry the model's fingerprint, the backend's storage format and checksums; one
// that does not fit this model and backend is refused with the reason and changes nothing.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "engine/engine_sequence.h"
#include "engine/session_file.h"

namespace ridge {
namespace {

constexpr char kSessionFileSuffix[] = ".ridgesession";

}  // namespace

int64_t Engine::MaxSessionFileBytes() const {
  // A state, the KV blocks of the whole context (or pool), its tokens, and room for the header.
  const KvLayout& kv = memory_.layout();
  const int64_t context = backend_->spec().max_position_embeddings;
  const int64_t positions =
      context > 0 ? context
                  : memory_.pools().blocks().total() * std::max<int64_t>(1, kv.block_size);
  return backend_->state_bytes_per_slot() + kv.BlocksFor(positions) * kv.bytes_per_block() +
         positions * int64_t{sizeof(int32_t)} + (int64_t{1} << 20);
}

int64_t Engine::SessionLimit() const {
  if (options_.max_sessions > 0) return options_.max_sessions;
  return options_.prefix_cache_slots / 2;
}

std::string Engine::FingerprintOrSpec() const {
  if (!options_.model_fingerprint.empty()) return options_.model_fingerprint;
  const ModelSpec& s = backend_->spec();
  return absl::StrCat(
      "spec:",
      HexDigest(Sha256Of(absl::StrCat(s.architecture, "/", s.LayerPattern(), "/", s.vocab_size, "/",
                                      s.hidden_size, "/", s.ParameterCount()))));
}

absl::Status Engine::RunOnEngineThread(std::function<void()> work) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loop_done_) return absl::UnavailableError("the engine has stopped");
    commands_.push_back([&] {
      work();
      done.set_value();
    });
  }
  wake_.notify_one();
  finished.wait();
  return absl::OkStatus();
}

bool Engine::FitsBesideSessions(Sequence& seq) {
  const KvLayout& kv = memory_.layout();
  if (kv.empty() || sessions_.empty()) return true;
  const int64_t total = memory_.pools().blocks().total();
  const int64_t available = total - memory_.PinnedBlocks();
  const int64_t peak = kv.BlocksFor(static_cast<int64_t>(seq.request.prompt.size()) +
                                    seq.request.sampling.max_tokens);
  if (peak <= available) return true;
  Finish(seq, FinishReason::kError,
         absl::OutOfRangeError(absl::StrCat(
             "max_tokens: the prompt (", seq.request.prompt.size(), " tokens) plus max_tokens (",
             seq.request.sampling.max_tokens, ") needs ", peak, " KV blocks; saved sessions hold ",
             total - available, " of the ", total, " (delete some, or ask for fewer tokens)")));
  return false;
}

bool Engine::JoinSession(Sequence& seq) {
  const std::string& id = seq.request.session_id;
  if (id.empty()) return true;
  auto fail = [&](absl::Status status) {
    Finish(seq, FinishReason::kError, std::move(status));
    return false;
  };
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (static_cast<int64_t>(sessions_.size()) >= SessionLimit()) {
      return fail(absl::ResourceExhaustedError(absl::StrCat(
          "session_id: the server holds ", sessions_.size(), " sessions, its limit; delete one")));
    }
    Session& created = sessions_[id];  // saved when the request ends
    created.in_use = true;
    created.space = seq.cache_space;
    seq.joined_session = true;
    return true;
  }
  Session& session = it->second;
  if (!session.lost.empty()) {
    const std::string lost = session.lost;
    sessions_.erase(it);  // said once; the id is free again
    return fail(absl::FailedPreconditionError(lost));
  }
  if (session.space != seq.cache_space) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "session_id: session '", id,
        "' was made with another cache_salt or solver budget; continue it with the same")));
  }
  if (session.in_use) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "session_id: session '", id, "' is in use by another request; one at a time")));
  }
  // The session's history comes first: the request is checked again with it.
  std::vector<int32_t> whole = session.tokens;
  whole.insert(whole.end(), session.pending.begin(), session.pending.end());
  whole.insert(whole.end(), seq.request.prompt.begin(), seq.request.prompt.end());
  EngineRequest joined = seq.request;
  const int64_t history = static_cast<int64_t>(whole.size() - joined.prompt.size());
  joined.prompt = std::move(whole);
  for (int64_t& point : joined.snapshot_points) point += history;
  if (joined.max_tokens_defaulted) FitDefaultMaxTokens(joined);
  if (absl::Status valid = Validate(joined); !valid.ok()) {
    return fail(
        absl::Status(valid.code(), absl::StrCat("with session '", id, "' (", session.tokens.size(),
                                                " tokens): ", valid.message())));
  }
  seq.request.prompt = std::move(joined.prompt);
  seq.request.snapshot_points = std::move(joined.snapshot_points);
  seq.request.sampling.max_tokens = joined.sampling.max_tokens;
  seq.feed = seq.request.prompt;
  seq.usage.prompt_tokens = static_cast<int64_t>(seq.feed.size());
  session.in_use = true;
  seq.joined_session = true;
  seq.session_node = session.node;
  return true;
}

void Engine::LeaveSession(Sequence& seq, bool ended_normally) {
  if (!seq.joined_session) return;
  seq.joined_session = false;
  seq.session_node = nullptr;
  auto it = sessions_.find(seq.request.session_id);
  if (it == sessions_.end()) return;
  Session& session = it->second;
  session.in_use = false;
  if (!ended_normally || seq.memory.slot < 0) {
    if (session.node == nullptr) sessions_.erase(it);  // never saved
    return;
  }
  std::vector<int32_t> history = seq.history();
  // A length finish leaves the last picked token unfed, and an EOS or stop token is never in
  // `generated`: the session keeps them, to be fed first.
  const int64_t consumed = std::min<int64_t>(seq.position, static_cast<int64_t>(history.size()));
  std::vector<int32_t> pending(history.begin() + consumed, history.end());
  if (seq.final_token.has_value()) pending.push_back(*seq.final_token);
  history.resize(consumed);
  PrefixCache::Node* node = memory_.RetirePinned(seq.cache_space, history, seq.memory);
  // Sessions may pin at most half of the KV cache, so requests always have the rest.
  const int64_t blocks = memory_.pools().blocks().total();
  if (node != nullptr && !memory_.layout().empty() && 2 * memory_.PinnedBlocks() > blocks) {
    memory_.Unpin(node);
    node = nullptr;
  }
  if (node == nullptr) {
    // Continuing the older state would leave this turn out of the history without a word.
    session.lost = absl::StrCat(
        "session_id: session '", it->first, "' lost its last turn (request ", seq.id,
        "): the prefix cache had no room for its state (sessions may hold half of the KV cache "
        "and half of the cache's states); send the whole history again to start it anew");
    Log(LogLevel::kWarning, session.lost);
    if (session.node != nullptr) memory_.Unpin(session.node);
    session.node = nullptr;
    return;
  }
  if (session.node != nullptr) memory_.Unpin(session.node);  // the new state holds its own pin
  session.node = node;
  session.tokens = std::move(history);
  session.pending = std::move(pending);
  session.space = seq.cache_space;
}

std::vector<SessionInfo> Engine::ListSessions() {
  std::vector<SessionInfo> out;
  const absl::Status ran = RunOnEngineThread([&] {
    for (const auto& [id, session] : sessions_) {
      if (session.node == nullptr) continue;  // not saved yet
      out.push_back({.id = id,
                     .tokens = static_cast<int64_t>(session.tokens.size() + session.pending.size()),
                     .in_use = session.in_use});
    }
  });
  if (!ran.ok()) return {};
  return out;
}

absl::Status Engine::DeleteSession(const std::string& id) {
  RETURN_IF_ERROR(ValidateSessionId(id));
  absl::Status status;
  const absl::Status ran = RunOnEngineThread([&] {
    auto it = sessions_.find(id);
    if (it != sessions_.end() && !it->second.lost.empty()) {
      sessions_.erase(it);  // forgetting a lost session is what the client wants
    } else if (it == sessions_.end() || it->second.node == nullptr) {
      status = absl::NotFoundError(absl::StrCat("no session '", id, "'"));
    } else if (it->second.in_use) {
      status =
          absl::FailedPreconditionError(absl::StrCat("session '", id, "' is in use by a request"));
    } else {
      memory_.Unpin(it->second.node);  // an ordinary cached state from now on
      sessions_.erase(it);
    }
  });
  RETURN_IF_ERROR(ran);
  return status;
}

absl::StatusOr<SessionInfo> Engine::SaveSessionToDisk(const std::string& id) {
  RETURN_IF_ERROR(ValidateSessionId(id));
  if (options_.session_dir.empty()) {
    return absl::FailedPreconditionError("the server has no --session-dir to save sessions in");
  }
  SessionFile file;
  absl::Status status;
  const absl::Status ran = RunOnEngineThread([&] {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.node == nullptr) {
      status = absl::NotFoundError(absl::StrCat("no session '", id, "'"));
      return;
    }
    file.tokens = it->second.tokens;
    file.pending = it->second.pending;
    file.cache_space = it->second.space;
    status = memory_.Export(it->second.node, &file.state, &file.kv_blocks);
  });
  RETURN_IF_ERROR(ran);
  RETURN_IF_ERROR(status);
  file.model_fingerprint = FingerprintOrSpec();
  file.state_format = backend_->state_format();
  file.kv_block_size = memory_.layout().empty() ? 0 : memory_.layout().block_size;
  const std::filesystem::path path =
      std::filesystem::path(options_.session_dir) / (id + kSessionFileSuffix);
  // Concurrent saves of one session write files of their own; the last rename wins.
  static std::atomic<uint64_t> saves{0};
  const std::filesystem::path partial =
      absl::StrCat(path.string(), ".partial.", ::getpid(), ".", saves.fetch_add(1));
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    const std::string bytes = SerializeSessionFile(file);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);
      return absl::UnavailableError(absl::StrCat("cannot write ", partial.string()));
    }
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);  // a reader never sees half a file
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", partial.string(), ": ", error.message()));
  }
  return SessionInfo{.id = id,
                     .tokens = static_cast<int64_t>(file.tokens.size() + file.pending.size()),
                     .path = path.string()};
}

absl::StatusOr<SessionInfo> Engine::LoadSessionFromDisk(const std::string& id) {
  RETURN_IF_ERROR(ValidateSessionId(id));
  if (options_.session_dir.empty()) {
    return absl::FailedPreconditionError("the server has no --session-dir to load sessions from");
  }
  const std::filesystem::path path =
      std::filesystem::path(options_.session_dir) / (id + kSessionFileSuffix);
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) return absl::NotFoundError(absl::StrCat("no session file ", path.string()));
  if (size > static_cast<uintmax_t>(MaxSessionFileBytes())) {
    return absl::FailedPreconditionError(absl::StrCat(
        path.string(), " is ", size, " bytes, more than a session of this model can be"));
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path.string()));
  auto refuse = [&](absl::Status status) {
    return absl::Status(status.code(), absl::StrCat(path.string(), ": ", status.message()));
  };
  absl::StatusOr<SessionFile> file = ParseSessionFile(bytes);
  if (!file.ok()) return refuse(file.status());
  // Whether it fits this model and backend.
  const ModelSpec& spec = backend_->spec();
  const KvLayout& kv = memory_.layout();
  const int64_t position = static_cast<int64_t>(file->tokens.size());
  if (file->model_fingerprint != FingerprintOrSpec()) {
    return refuse(absl::FailedPreconditionError(
        "it was saved from another model (its fingerprint differs from this model's)"));
  }
  if (file->state_format != backend_->state_format()) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("its states are stored as '", file->state_format, "'; this backend's are '",
                     backend_->state_format(), "'")));
  }
  std::vector<int32_t> all = file->tokens;
  all.insert(all.end(), file->pending.begin(), file->pending.end());
  const int64_t context = spec.max_position_embeddings;
  const int64_t history = static_cast<int64_t>(all.size());
  if (position < 1 || (context > 0 && history >= context)) {
    return refuse(absl::OutOfRangeError(absl::StrCat(
        "its ", history, " tokens do not leave room in the model's context of ", context)));
  }
  for (int32_t token : all) {
    if (token < 0 || token >= spec.vocab_size) {
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("token id ", token, " is outside the vocabulary")));
    }
  }
  const int64_t block_size = kv.empty() ? 0 : kv.block_size;
  if (file->kv_block_size != block_size ||
      static_cast<int64_t>(file->kv_blocks.size()) != kv.BlocksFor(position)) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "it has ", file->kv_blocks.size(), " KV blocks of ", file->kv_block_size,
        " tokens; this server's cache needs ", kv.BlocksFor(position), " of ", block_size)));
  }
  // The parts' sizes before anything is evicted to make room for them.
  if (static_cast<int64_t>(file->state.size()) != backend_->state_bytes_per_slot() ||
      std::any_of(file->kv_blocks.begin(), file->kv_blocks.end(), [&](const std::string& b) {
        return static_cast<int64_t>(b.size()) != kv.bytes_per_block();
      })) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("its state or KV blocks do not have this backend's sizes (",
                     backend_->state_bytes_per_slot(), " and ", kv.bytes_per_block(), " bytes)")));
  }
  absl::Status status;
  const absl::Status ran = RunOnEngineThread([&] {
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.in_use) {
      status =
          absl::FailedPreconditionError(absl::StrCat("session '", id, "' is in use by a request"));
      return;
    }
    if (it == sessions_.end() && static_cast<int64_t>(sessions_.size()) >= SessionLimit()) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("the server holds ", sessions_.size(), " sessions, its limit; delete one"));
      return;
    }
    const int64_t blocks = memory_.pools().blocks().total();
    if (!kv.empty() &&
        2 * (memory_.PinnedBlocks() + static_cast<int64_t>(file->kv_blocks.size())) > blocks) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "sessions may hold half of the KV cache's ", blocks, " blocks; this one needs ",
          file->kv_blocks.size(), " more than they hold now"));
      return;
    }
    if (static_cast<int64_t>(file->kv_blocks.size()) > memory_.FreeBlocks()) {
      status = absl::ResourceExhaustedError("the KV cache has no room for the session now");
      return;
    }
    PrefixCache::Node* node = nullptr;
    // The same state may be cached already (a session saved earlier in this process).
    if (PrefixCache::Node* cached = memory_.Find(file->cache_space, file->tokens);
        cached != nullptr) {
      node = cached;
      memory_.Pin(node);
    } else {
      absl::StatusOr<PrefixCache::Node*> imported =
          memory_.Import(file->cache_space, file->tokens, file->state, file->kv_blocks);
      if (!imported.ok()) {
        status = imported.status();
        return;
      }
      node = *imported;
    }
    if (it != sessions_.end() && it->second.node != nullptr) memory_.Unpin(it->second.node);
    sessions_[id] = {
        .node = node, .tokens = file->tokens, .pending = file->pending, .space = file->cache_space};
  });
  RETURN_IF_ERROR(ran);
  if (!status.ok()) return refuse(status);
  return SessionInfo{.id = id, .tokens = static_cast<int64_t>(all.size()), .path = path.string()};
}

}  // namespace ridge
