// Decode steps replayed from captured CUDA graphs, for every CUDA backend. A backend whose step
// launches depend only on host values it gathers into a StepGraphKey (the batch bucket the step
// is padded to, what it leaves for the host, and whatever else its launches take from the host)
// captures a key's step the second time the key comes and replays it from then on; a key whose
// capture failed runs eagerly from then on. A step may come in parts, each captured into a graph
// of its own and launched in turn: the device starts on the first while the host launches the
// next (a launch takes about 2 us a node, most of a millisecond for a 36-layer step's graph).
// Graphs point at the step buffers they were captured with: a backend calls Clear() before it
// replaces any of them. Not for use outside models/cuda.
#pragma once

#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace ridge {

// Decode steps are padded up to one of these batch sizes (at most 15 padding sequences past 64;
// fp8 KV's 166 sequences of 16K run as 176); larger ones run eagerly.
inline constexpr int64_t kGraphBuckets[] = {1,  2,   4,   8,   16,  24,  32,  40,  48,  56,  64, 80,
                                            96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256};
inline constexpr int64_t kMaxGraphBatch = 256;

// Graphs a backend keeps at most (a graph of a 36-layer step holds a few hundred nodes).
inline constexpr size_t kMaxStepGraphs = 64;

// The smallest bucket that holds n sequences (n itself above kMaxGraphBatch).
int64_t GraphBucket(int64_t n);

struct StepGraphKey {
  int64_t batch = 0;    // the bucket
  int32_t output = 0;   // what the step leaves for the host (a backend's enum)
  int64_t variant = 0;  // anything else a launch takes from the host; 0 if nothing
  auto operator<=>(const StepGraphKey&) const = default;
};

class StepGraphs {
 public:
  // At most `capacity` graphs are kept; the least recently replayed goes first.
  explicit StepGraphs(size_t capacity);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs one step on `stream`: replays key's graph, or captures enqueue() into one on the key's
  // second use and replays it, or calls enqueue() (which queues the step on `stream`, reading
  // nothing the host changes between steps but the device buffers' contents). No graph of this
  // cache may still be running on `stream` when a capture evicts one: call after the previous
  // step finished.
  absl::Status Run(const StepGraphKey& key, cudaStream_t stream,
                   const std::function<absl::Status()>& enqueue);
  // The same for a step whose parts, queued in order, make it up: a graph each.
  absl::Status Run(const StepGraphKey& key, cudaStream_t stream,
                   std::span<const std::function<absl::Status()>> parts);
  // Destroys every graph (the buffers they point at are about to go) and forgets the uses.
  void Clear();

  size_t size() const { return graphs_.size(); }
  int64_t replays() const { return replays_; }  // steps run from a graph since creation

 private:
  struct Entry {
    std::vector<cudaGraphExec_t> execs;  // one a part
    uint64_t last_use = 0;
  };
  // Captures the parts into graphs; false (nothing kept) when one cannot be.
  static bool Capture(cudaStream_t stream, std::span<const std::function<absl::Status()>> parts,
                      std::vector<cudaGraphExec_t>* execs);
  static void Destroy(Entry& entry);
  void EvictOldest();

  size_t capacity_;
  uint64_t clock_ = 0;
  int64_t replays_ = 0;
  std::map<StepGraphKey, Entry> graphs_;
  std::map<StepGraphKey, int> uses_;
  std::set<StepGraphKey> eager_;
};

}  // namespace ridge
