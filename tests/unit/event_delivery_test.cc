// EventDelivery: events reach their sinks in the order posted, Flush waits for them, and the
// destructor delivers what is still queued.
#include "engine/event_delivery.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ridge {
namespace {

// Records event ids; the first event blocks until released, so that posts pile up behind it.
class RecordingSink final : public RequestSink {
 public:
  void OnEvent(RequestEvent event) override {
    if (hold_first_ && ids_.empty()) {
      std::unique_lock<std::mutex> lock(mutex_);
      released_cv_.wait(lock, [&] { return released_; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.push_back(event.id);
  }
  void HoldFirst() { hold_first_ = true; }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
  }
  std::vector<RequestId> ids() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ids_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool hold_first_ = false, released_ = false;
  std::vector<RequestId> ids_;
};

EventDelivery::Events MakeEvents(const std::shared_ptr<RequestSink>& sink, RequestId first,
                                 int count) {
  EventDelivery::Events events;
  for (int i = 0; i < count; ++i) {
    RequestEvent event;
    event.id = first + i;
    events.emplace_back(sink, std::move(event));
  }
  return events;
}

TEST(EventDeliveryTest, DeliversInPostOrderAndFlushWaitsForIt) {
  auto sink = std::make_shared<RecordingSink>();
  sink->HoldFirst();
  EventDelivery delivery;
  for (RequestId first : {1, 4, 7}) {
    EventDelivery::Events events = MakeEvents(sink, first, 3);
    delivery.Post(events);
    EXPECT_TRUE(events.empty());
  }
  std::thread flusher([&] { delivery.Flush(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(sink->ids().empty());  // the first event is held, and everything behind it
  sink->Release();
  flusher.join();  // returns only once all nine are delivered
  EXPECT_EQ(sink->ids(), (std::vector<RequestId>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(EventDeliveryTest, DestructorDeliversWhatIsQueued) {
  auto sink = std::make_shared<RecordingSink>();
  {
    EventDelivery delivery;
    EventDelivery::Events events = MakeEvents(sink, 1, 100);
    delivery.Post(events);
  }
  ASSERT_EQ(sink->ids().size(), 100u);
  EXPECT_EQ(sink->ids().back(), 100);
}

TEST(EventDeliveryTest, FlushWithNothingPostedReturns) {
  EventDelivery delivery;
  delivery.Flush();
  EventDelivery::Events none;
  delivery.Post(none);
  delivery.Flush();
}

}  // namespace
}  // namespace ridge
