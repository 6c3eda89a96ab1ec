// Capture, replay and eviction of decode-step graphs (step_graphs.h).
#include "models/cuda/step_graphs.h"

#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"

namespace ridge {

int64_t GraphBucket(int64_t n) {
  for (int64_t b : kGraphBuckets) {
    if (b >= n) return b;
  }
  return n;
}

StepGraphs::StepGraphs(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

StepGraphs::~StepGraphs() { Clear(); }

void StepGraphs::Destroy(Entry& entry) {
  for (cudaGraphExec_t exec : entry.execs) cudaGraphExecDestroy(exec);
  entry.execs.clear();
}

void StepGraphs::Clear() {
  for (auto& [key, entry] : graphs_) Destroy(entry);
  graphs_.clear();
  uses_.clear();
}

void StepGraphs::EvictOldest() {
  auto oldest = graphs_.begin();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  }
  Destroy(oldest->second);
  uses_.erase(oldest->first);
  graphs_.erase(oldest);
}

bool StepGraphs::Capture(cudaStream_t stream, std::span<const std::function<absl::Status()>> parts,
                         std::vector<cudaGraphExec_t>* execs) {
  for (const auto& part : parts) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) break;
    const absl::Status enqueued = part();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    cudaError_t instantiated = cudaSuccess;
    if (enqueued.ok() && ended == cudaSuccess) {
      instantiated = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!enqueued.ok() || ended != cudaSuccess || instantiated != cudaSuccess) break;
    execs->push_back(exec);
  }
  if (execs->size() == parts.size()) return true;
  for (cudaGraphExec_t exec : *execs) cudaGraphExecDestroy(exec);
  execs->clear();
  cudaGetLastError();  // a failed capture is not sticky
  return false;
}

absl::Status StepGraphs::Run(const StepGraphKey& key, cudaStream_t stream,
                             const std::function<absl::Status()>& enqueue) {
  return Run(key, stream, {&enqueue, 1});
}

absl::Status StepGraphs::Run(const StepGraphKey& key, cudaStream_t stream,
                             std::span<const std::function<absl::Status()>> parts) {
  auto enqueue_all = [&]() -> absl::Status {
    for (const auto& part : parts) RETURN_IF_ERROR(part());
    return absl::OkStatus();
  };
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (eager_.contains(key) || ++uses_[key] < 2) return enqueue_all();
    std::vector<cudaGraphExec_t> execs;
    if (!Capture(stream, parts, &execs)) {
      eager_.insert(key);  // run this key eagerly rather than retry every step
      return enqueue_all();
    }
    if (graphs_.size() >= capacity_) EvictOldest();
    it = graphs_.emplace(key, Entry{std::move(execs), 0}).first;
  }
  it->second.last_use = ++clock_;
  for (cudaGraphExec_t exec : it->second.execs) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream));
  }
  ++replays_;
  return absl::OkStatus();
}

}  // namespace ridge
