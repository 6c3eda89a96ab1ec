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

void StepGraphs::Clear() {
  for (auto& [key, entry] : graphs_) cudaGraphExecDestroy(entry.exec);
  graphs_.clear();
  uses_.clear();
}

void StepGraphs::EvictOldest() {
  auto oldest = graphs_.begin();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  }
  cudaGraphExecDestroy(oldest->second.exec);
  uses_.erase(oldest->first);
  graphs_.erase(oldest);
}

absl::Status StepGraphs::Run(const StepGraphKey& key, cudaStream_t stream,
                             const std::function<absl::Status()>& enqueue) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (eager_.contains(key) || ++uses_[key] < 2) return enqueue();
    cudaGraph_t graph = nullptr;
    RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status enqueued = enqueue();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    cudaError_t instantiated = cudaSuccess;
    if (enqueued.ok() && ended == cudaSuccess) {
      instantiated = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!enqueued.ok() || ended != cudaSuccess || instantiated != cudaSuccess) {
      cudaGetLastError();  // a failed capture is not sticky
      eager_.insert(key);  // run this key eagerly rather than retry every step
      return enqueue();
    }
    if (graphs_.size() >= capacity_) EvictOldest();
    it = graphs_.emplace(key, Entry{exec, 0}).first;
  }
  it->second.last_use = ++clock_;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second.exec, stream));
  ++replays_;
  return absl::OkStatus();
}

}  // namespace ridge
