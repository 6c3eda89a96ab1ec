// A RequestSink that hands events from the engine thread to the transport serving the request.
// OnEvent only appends under a lock (and calls the wake function, if any), so the engine never
// waits on a client.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/request.h"

namespace ridge {

class EventQueue final : public RequestSink {
 public:
  EventQueue() = default;
  // `wake` is called (on the engine thread, without the queue's lock) after each event: it
  // must be quick and must not block.
  explicit EventQueue(std::function<void()> wake) : wake_(std::move(wake)) {}

  void OnEvent(RequestEvent event) override;

  // Waits up to `timeout` for at least one event and returns every queued event (maybe none).
  std::vector<RequestEvent> Wait(std::chrono::milliseconds timeout);
  // Every queued event, without waiting.
  std::vector<RequestEvent> Take() { return Wait(std::chrono::milliseconds(0)); }

 private:
  const std::function<void()> wake_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestEvent> events_;
};

}  // namespace ridge
