// A RequestSink that hands events from the engine thread to the transport thread serving the
// request. OnEvent only appends under a lock, so the engine never waits on a client.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "engine/request.h"

namespace ridge {

class EventQueue final : public RequestSink {
 public:
  void OnEvent(RequestEvent event) override;

  // Waits up to `timeout` for at least one event and returns every queued event (maybe none).
  std::vector<RequestEvent> Wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestEvent> events_;
};

}  // namespace ridge
