// Hands the engine's events to their sinks on a thread of its own. A sink's OnEvent may wake a
// transport thread (a futex wake, microseconds each); done on the scheduler thread for every
// sequence of a step, that kept the GPU idle between steps. The scheduler now posts a step's
// events in one hand-off; one thread delivers them in the order posted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace ridge {

class EventDelivery {
 public:
  using Events = std::vector<std::pair<std::shared_ptr<RequestSink>, RequestEvent>>;

  EventDelivery();
  // Delivers everything posted, then joins the thread. Not to be destroyed from a sink.
  ~EventDelivery();
  EventDelivery(const EventDelivery&) = delete;
  EventDelivery& operator=(const EventDelivery&) = delete;

  // Queues the events (leaving `events` empty) for delivery after those posted before.
  void Post(Events& events);
  // Waits until every event posted before the call has been delivered (true) or the deadline
  // passes (false). From a sink, on the delivery thread, it cannot wait for the events being
  // delivered and returns false at once.
  bool Flush(std::chrono::steady_clock::time_point deadline);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable work_, delivered_;
  Events pending_;
  int64_t posted_ = 0, done_ = 0;  // events posted and delivered so far
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ridge
