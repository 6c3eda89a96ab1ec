#include "engine/scheduler_policy.h"

#include <gtest/gtest.h>

#include <map>

namespace ridge {
namespace {

using Prefill = std::vector<std::pair<RequestId, int64_t>>;

// Simulates the engine's use of PlanStep over several steps: requests arrive at a step with a
// prompt length and a number of tokens to generate, may be cancelled at a step, and the table
// says who runs each step.
struct Arrival {
  int step;
  RequestId id;
  int64_t prompt;
  int64_t generate;
  int cancel_at = -1;
};

struct Expected {
  std::vector<RequestId> admit;
  Prefill prefill;
  std::vector<RequestId> decode;
};

void Simulate(const std::vector<Arrival>& arrivals, int64_t slots, int64_t budget,
              const std::vector<Expected>& steps) {
  struct State {
    int64_t prompt_left, to_generate;
  };
  std::map<RequestId, State> state;
  std::vector<RequestId> running, waiting;
  for (size_t step = 0; step < steps.size(); ++step) {
    for (const Arrival& a : arrivals) {
      if (a.step == static_cast<int>(step)) {
        waiting.push_back(a.id);
        state[a.id] = {a.prompt, a.generate};
      }
      if (a.cancel_at == static_cast<int>(step)) {
        std::erase(running, a.id);
        std::erase(waiting, a.id);
      }
    }
    std::vector<RunningSequenceInfo> r;
    for (RequestId id : running)
      r.push_back({.id = id, .prompt_tokens_left = state[id].prompt_left});
    std::vector<WaitingRequestInfo> w;
    for (RequestId id : waiting) w.push_back({id, state[id].prompt_left});
    const StepPlan plan = PlanStep(
        r, w,
        {.free_slots = slots - static_cast<int64_t>(running.size()), .prefill_tokens = budget},
        KvGeometry{});
    EXPECT_EQ(plan.admit, steps[step].admit) << "step " << step;
    EXPECT_EQ(plan.prefill, steps[step].prefill) << "step " << step;
    EXPECT_EQ(plan.decode, steps[step].decode) << "step " << step;
    for (RequestId id : plan.admit) {
      std::erase(waiting, id);
      running.push_back(id);
    }
    // A prompt finishing this step yields the first token; decoding yields one more.
    for (auto [id, n] : plan.prefill) {
      state[id].prompt_left -= n;
      if (state[id].prompt_left == 0) --state[id].to_generate;
    }
    for (RequestId id : plan.decode) --state[id].to_generate;
    std::erase_if(running, [&](RequestId id) { return state[id].to_generate == 0; });
  }
}

TEST(SchedulerPolicyTest, LongPromptIsSplitAndNeverStallsDecode) {
  // Request 1 decodes; request 2 has a 10-token prompt and the budget is 4 tokens per step.
  Simulate({{0, 1, 2, 5}, {1, 2, 10, 2}}, /*slots=*/4, /*budget=*/4,
           {
               {{1}, {{1, 2}}, {}},   // 1 admitted, its prompt fits, first token
               {{2}, {{2, 4}}, {1}},  // 2 admitted: 4 of 10 prompt tokens; 1 decodes
               {{}, {{2, 4}}, {1}},   // 4 more
               {{}, {{2, 2}}, {1}},   // last 2: first token of 2
               {{}, {}, {1, 2}},      // both decode; 1 finishes (5 tokens), 2 too (2)
               {{}, {}, {}},
           });
}

TEST(SchedulerPolicyTest, ALongPromptLeavesRoomForTheRequestsBehindIt) {
  // A million-token prompt is prefilling when short requests arrive: they are admitted and
  // prefilled in the very next step, the long prompt keeps the rest of the budget.
  Simulate({{0, 1, 1000000, 1}, {1, 2, 4, 1}, {1, 3, 100, 1}, {2, 4, 30, 2}}, /*slots=*/4,
           /*budget=*/512,
           {
               {{1}, {{1, 512}}, {}},                      // alone: the whole budget
               {{2, 3}, {{1, 444}, {2, 4}, {3, 64}}, {}},  // 2's and 3's first pieces fit
               {{4}, {{1, 446}, {3, 36}, {4, 30}}, {}},    // 2 done; 3 and 4 finish
               {{}, {{1, 512}}, {4}},                      // the long one alone again
           });
}

TEST(SchedulerPolicyTest, QueueIsFifoAndWaitsForFreeSlots) {
  Simulate({{0, 1, 1, 3}, {0, 2, 1, 1}, {0, 3, 1, 2}, {1, 4, 1, 1}}, /*slots=*/2, /*budget=*/8,
           {
               {{1, 2}, {{1, 1}, {2, 1}}, {}},  // two slots; 2 finishes after its first token
               {{3}, {{3, 1}}, {1}},            // 3 takes the freed slot before 4 (FIFO)
               {{}, {}, {1, 3}},                // 1 and 3 finish
               {{4}, {{4, 1}}, {}},             // 4 finally runs
           });
}

TEST(SchedulerPolicyTest, BudgetSharedInAdmissionOrderAndCancellationFreesSlot) {
  Simulate({{0, 1, 6, 9, 2}, {0, 2, 6, 9}, {0, 3, 3, 1}}, /*slots=*/2, /*budget=*/8,
           {
               {{1, 2}, {{1, 6}, {2, 2}}, {}},  // 1's whole prompt, 2 gets the rest of the budget
               {{}, {{2, 4}}, {1}},             // 2 finishes its prompt
               {{3}, {{3, 3}}, {2}},            // 1 cancelled: 3 takes its slot
           });
}

TEST(SchedulerPolicyTest, NoSlotsNoAdmission) {
  const std::vector<WaitingRequestInfo> waiting = {{7, 3}};
  const StepPlan plan = PlanStep({}, waiting, {.free_slots = 0, .prefill_tokens = 100}, {});
  EXPECT_TRUE(plan.admit.empty());
  EXPECT_TRUE(plan.prefill.empty());
}

}  // namespace
}  // namespace ridge
