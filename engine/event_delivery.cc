#include "engine/event_delivery.h"

#include "base/check.h"

namespace ridge {

EventDelivery::EventDelivery() : thread_([this] { Loop(); }) {}

EventDelivery::~EventDelivery() {
  RIDGE_CHECK(std::this_thread::get_id() != thread_.get_id());  // a sink cannot join its thread
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void EventDelivery::Post(Events& events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_ += static_cast<int64_t>(events.size());
    if (pending_.empty()) {
      pending_.swap(events);
    } else {
      for (auto& entry : events) pending_.push_back(std::move(entry));
      events.clear();
    }
  }
  work_.notify_one();
}

bool EventDelivery::Flush(std::chrono::steady_clock::time_point deadline) {
  if (std::this_thread::get_id() == thread_.get_id()) return false;
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t target = posted_;
  return delivered_.wait_until(lock, deadline, [&] { return done_ >= target; });
}

void EventDelivery::Loop() {
  Events batch;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) break;  // stopping, with nothing left
    batch.swap(pending_);
    lock.unlock();
    for (auto& [sink, event] : batch) sink->OnEvent(std::move(event));
    const int64_t count = static_cast<int64_t>(batch.size());
    batch.clear();  // releases the sinks here, not under the lock
    lock.lock();
    done_ += count;
    delivered_.notify_all();
  }
}

}  // namespace ridge
