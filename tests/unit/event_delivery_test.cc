// EventDelivery: events reach their sinks in the order posted, Flush waits for them, and the
// destructor delivers what is still queued.
#include "engine/event_delivery.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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
    std::unique_lock<std::mutex> lock(mutex_);
    if (hold_first_ && ids_.empty()) released_cv_.wait(lock, [&] { return released_; });
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

std::chrono::steady_clock::time_point In(std::chrono::milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

std::vector<RequestId> Ids(RequestId first, RequestId last) {
  std::vector<RequestId> ids;
  for (RequestId id = first; id <= last; ++id) ids.push_back(id);
  return ids;
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
  std::atomic<bool> flushed = false;
  std::vector<RequestId> seen_by_flusher;
  std::thread flusher([&] {
    EXPECT_TRUE(delivery.Flush(In(std::chrono::seconds(30))));
    seen_by_flusher = sink->ids();
    flushed = true;
  });
  EXPECT_FALSE(delivery.Flush(In(std::chrono::milliseconds(20))));  // the first event is held
  EXPECT_FALSE(flushed);
  EXPECT_TRUE(sink->ids().empty());  // and everything behind it
  sink->Release();
  flusher.join();
  EXPECT_EQ(seen_by_flusher, Ids(1, 9));  // Flush returned only once all nine were delivered
}

TEST(EventDeliveryTest, DestructorDeliversWhatIsQueued) {
  auto sink = std::make_shared<RecordingSink>();
  sink->HoldFirst();
  std::thread releaser;
  {
    EventDelivery delivery;
    for (RequestId first : {1, 51}) {
      EventDelivery::Events events = MakeEvents(sink, first, 50);
      delivery.Post(events);
    }
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      sink->Release();  // the destructor has started by now, with 100 events still queued
    });
  }
  releaser.join();
  EXPECT_EQ(sink->ids(), Ids(1, 100));
}

// A sink that flushes from the delivery thread must not wait for itself.
class FlushingSink final : public RequestSink {
 public:
  void OnEvent(RequestEvent) override {
    result_ = delivery_->Flush(In(std::chrono::seconds(30)));
    called_ = true;
  }
  EventDelivery* delivery_ = nullptr;
  std::atomic<bool> called_ = false, result_ = true;
};

TEST(EventDeliveryTest, FlushFromASinkReturnsAtOnce) {
  auto sink = std::make_shared<FlushingSink>();
  EventDelivery delivery;
  sink->delivery_ = &delivery;
  EventDelivery::Events events = MakeEvents(sink, 1, 1);
  delivery.Post(events);
  EXPECT_TRUE(delivery.Flush(In(std::chrono::seconds(30))));
  EXPECT_TRUE(sink->called_);
  EXPECT_FALSE(sink->result_);
}

TEST(EventDeliveryTest, FlushWithNothingPostedReturns) {
  EventDelivery delivery;
  EXPECT_TRUE(delivery.Flush(In(std::chrono::milliseconds(0))));
  EventDelivery::Events none;
  delivery.Post(none);
  EXPECT_TRUE(delivery.Flush(In(std::chrono::milliseconds(0))));
}

}  // namespace
}  // namespace ridge
