// The KV cache's bookkeeping: the block pool, a sequence's block table, slots and blocks
// composed, the memory planner, and the scheduler with blocks in tables of
// simulated steps.
#include <gtest/gtest.h>

#include <map>

#include "engine/hybrid_memory.h"
#include "engine/kv_block_pool.h"
#include "engine/memory_plan.h"
#include "engine/scheduler_policy.h"

namespace ridge {
namespace {

KvLayout Layout(int64_t block_size) {
  KvLayout layout;
  layout.block_size = block_size;
  layout.floats_per_token = 8;
  layout.layer_offset = {0};
  return layout;
}

TEST(KvBlockPoolTest, TakeRetainRelease) {
  KvBlockPool pool(3);
  const int32_t a = pool.Take(), b = pool.Take(), c = pool.Take();
  EXPECT_EQ(pool.Take(), -1);
  EXPECT_EQ(pool.used(), 3);
  pool.Retain(b);
  pool.Release(b);
  EXPECT_EQ(pool.free(), 0);  // still held once
  pool.Release(b);
  pool.Release(a);
  pool.Release(c);
  EXPECT_EQ(pool.free(), 3);
}

TEST(BlockTableTest, GrowsByBlocksAndFailsWholeWhenShort) {
  KvBlockPool pool(4);
  BlockTable table;
  const KvLayout layout = Layout(4);
  EXPECT_TRUE(table.Grow(layout, 5, pool));  // positions 0-4: two blocks
  EXPECT_EQ(table.size(), 2);
  EXPECT_TRUE(table.Grow(layout, 8, pool));  // still two
  EXPECT_EQ(table.size(), 2);
  EXPECT_FALSE(table.Grow(layout, 17, pool));  // needs three more, two are free
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(pool.free(), 2);
  table.Clear(pool);
  EXPECT_EQ(pool.free(), 4);
}

TEST(HybridMemoryTest, ASequenceHoldsASlotAndBlocksAndGivesAllBack) {
  HybridMemory memory(2, Layout(4), 5);
  SequenceMemory a, b, c;
  ASSERT_TRUE(memory.TakeSlot(a));
  ASSERT_TRUE(memory.TakeSlot(b));
  EXPECT_EQ(a.slot, 0);  // the lowest slot first
  EXPECT_EQ(b.slot, 1);
  EXPECT_FALSE(memory.TakeSlot(c));
  ASSERT_TRUE(memory.Grow(a, 9));   // 3 blocks
  EXPECT_FALSE(memory.Grow(b, 9));  // 2 left
  EXPECT_EQ(b.blocks.size(), 0);
  memory.Release(a);
  EXPECT_EQ(a.slot, -1);
  EXPECT_EQ(memory.slots().free(), 1);
  EXPECT_EQ(memory.blocks().free(), 5);
  EXPECT_EQ(memory.layout().BlocksFor(33), 9);
  HybridMemory none(1, KvLayout{}, 100);  // no full-attention layers: no blocks at all
  EXPECT_EQ(none.blocks().total(), 0);
  EXPECT_EQ(none.layout().BlocksFor(1000), 0);
}

TEST(MemoryPlanTest, ClampsSlotsThenBlocksWithWarnings) {
  MemoryPlan plan = PlanMemory({.budget_bytes = 1000,
                                .state_bytes_per_slot = 100,
                                .kv_bytes_per_block = 10,
                                .kv_block_size = 4,
                                .slots = 20,
                                .default_context = 16});
  EXPECT_EQ(plan.slots, 9);       // 110 bytes a slot with one block
  EXPECT_EQ(plan.kv_blocks, 10);  // the 100 bytes left; 4 blocks a slot would be 36
  EXPECT_EQ(plan.warnings.size(), 1u);
  plan = PlanMemory({.budget_bytes = 1000,
                     .state_bytes_per_slot = 100,
                     .kv_bytes_per_block = 10,
                     .kv_block_size = 4,
                     .slots = 2,
                     .kv_blocks = 500});
  EXPECT_EQ(plan.slots, 2);
  EXPECT_EQ(plan.kv_blocks, 80);
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("only 80 fit"), std::string::npos);
  plan = PlanMemory({.budget_bytes = 1 << 20, .state_bytes_per_slot = 100, .slots = 4});
  EXPECT_EQ(plan.kv_blocks, 0);  // no attention layers
  EXPECT_TRUE(plan.warnings.empty());
}

// Simulates the engine over steps with a KV pool: requests arrive with a prompt and a number of
// tokens to generate; the table says what each step plans. Blocks are taken as the engine takes
// them, so the test also checks that the plan never over-commits the pool.
struct Arrival {
  int step;
  RequestId id;
  int64_t prompt;
  int64_t generate;
};

struct Expected {
  std::vector<RequestId> preempt, admit;
  std::vector<std::pair<RequestId, int64_t>> prefill;
  std::vector<RequestId> decode;
};

void Simulate(const std::vector<Arrival>& arrivals, int64_t slots, int64_t blocks,
              int64_t block_size, int64_t budget, const std::vector<Expected>& steps) {
  struct State {
    int64_t prompt, generated = 0, to_generate;
    int64_t feed = 0, prefilled = 0;  // tokens to prefill since admission, and done
    int64_t position = 0, table = 0;
  };
  std::map<RequestId, State> state;
  std::vector<RequestId> running, waiting;
  int64_t free_blocks = blocks;
  const KvGeometry kv{.block_size = block_size};
  for (size_t step = 0; step < steps.size(); ++step) {
    for (const Arrival& a : arrivals) {
      if (a.step == static_cast<int>(step)) {
        waiting.push_back(a.id);
        state[a.id] = {.prompt = a.prompt, .to_generate = a.generate};
      }
    }
    std::vector<RunningSequenceInfo> r;
    for (RequestId id : running) {
      const State& s = state[id];
      r.push_back({id, s.feed - s.prefilled, s.position, s.table});
    }
    std::vector<WaitingRequestInfo> w;
    for (RequestId id : waiting) {
      const State& s = state[id];
      w.push_back({id, s.prompt + s.generated});
    }
    const StepPlan plan = PlanStep(r, w,
                                   {.free_slots = slots - static_cast<int64_t>(running.size()),
                                    .free_blocks = free_blocks,
                                    .prefill_tokens = budget},
                                   kv);
    EXPECT_EQ(plan.preempt, steps[step].preempt) << "step " << step;
    EXPECT_EQ(plan.admit, steps[step].admit) << "step " << step;
    EXPECT_EQ(plan.prefill, steps[step].prefill) << "step " << step;
    EXPECT_EQ(plan.decode, steps[step].decode) << "step " << step;
    for (RequestId id : plan.preempt) {
      std::erase(running, id);
      waiting.insert(waiting.begin(), id);
      State& s = state[id];
      free_blocks += s.table;
      s.table = s.position = 0;
    }
    for (RequestId id : plan.admit) {
      std::erase(waiting, id);
      running.push_back(id);
      State& s = state[id];
      s.feed = s.prompt + s.generated;  // after a preemption: recomputed
      s.prefilled = 0;
    }
    auto take = [&](State& s, int64_t n) {
      const int64_t needed = kv.BlocksToReach(s.table, s.position + n);
      free_blocks -= needed;
      ASSERT_GE(free_blocks, 0) << "step " << step << " over-commits the pool";
      s.table += needed;
      s.position += n;
    };
    for (auto [id, n] : plan.prefill) {
      State& s = state[id];
      take(s, n);
      s.prefilled += n;
      if (s.prefilled == s.feed) ++s.generated;  // a piece ending the feed picks a token
    }
    for (RequestId id : plan.decode) {
      State& s = state[id];
      take(s, 1);
      ++s.generated;
    }
    std::erase_if(running, [&](RequestId id) {
      State& s = state[id];
      if (s.generated < s.to_generate) return false;
      free_blocks += s.table;
      return true;
    });
  }
}

TEST(SchedulerBlocksTest, AdmissionWaitsForBlocksAndKeepsAWatermark) {
  // Blocks of 4 tokens, 4 blocks. 1's 8-token prompt takes 2; its decode token at position 8 a
  // third. 2 arrives then: one block is free, but it is 1's watermark, so 2 waits until 1 is
  // done.
  Simulate({{0, 1, 8, 3}, {1, 2, 4, 1}}, /*slots=*/4, /*blocks=*/4, /*block_size=*/4,
           /*budget=*/16,
           {
               {{}, {1}, {{1, 8}}, {}},  // 1 admitted: 2 blocks, its first token
               {{}, {}, {}, {1}},        // 1 takes its third block; 2 waits for the watermark
               {{}, {}, {}, {1}},        // 1 done (3 tokens)
               {{}, {2}, {{2, 4}}, {}},  // 2 runs
           });
}

TEST(SchedulerBlocksTest, APromptPieceStopsWhereTheBlocksEnd) {
  // 3 blocks of 4, budget 8: 1 gets its whole 6-token prompt (2 blocks); 2 is admitted with the
  // 2 tokens left of the budget (1 block); then 2's prompt goes on only as far as its block
  // reaches, and waits while 1 holds the rest.
  Simulate({{0, 1, 6, 4}, {0, 2, 6, 1}}, /*slots=*/2, /*blocks=*/3, /*block_size=*/4,
           /*budget=*/8,
           {
               {{}, {1, 2}, {{1, 6}, {2, 2}}, {}},
               {{}, {}, {{2, 2}}, {1}},  // 2 fills its block (positions 2, 3)
               {{}, {}, {}, {1}},        // no block for 2; 1 (position 7) needs none
               {{2}, {}, {}, {1}},       // 1 needs a block at 8: the newest, 2, is preempted
               {{}, {2}, {{2, 6}}, {}},  // 1 done; 2 recomputes its prompt
           });
}

TEST(SchedulerBlocksTest, DecoderOutOfBlocksPreemptsTheNewest) {
  // 3 blocks of 2 tokens. 1 and 2 each hold one block after their 2-token prompts; 1 then takes
  // the last block; when 2 needs one, it is the newest: it preempts itself, and is readmitted
  // once 1 is done, recomputing its prompt and its token.
  Simulate({{0, 1, 2, 3}, {0, 2, 2, 3}}, /*slots=*/2, /*blocks=*/3, /*block_size=*/2,
           /*budget=*/8,
           {
               {{}, {1, 2}, {{1, 2}, {2, 2}}, {}},  // first tokens; 1 block free
               {{2}, {}, {}, {1}},                  // 1 takes it; 2 has none: preempted
               {{}, {}, {}, {1}},                   // 1 finishes (3 tokens)
               {{}, {2}, {{2, 3}}, {}},             // 2 recomputes prompt + its token
               {{}, {}, {}, {2}},
           });
}

TEST(SchedulerBlocksTest, AnOlderPromptWithoutBlocksPreemptsANewerDecoder) {
  // A (older) has 4 prompt tokens left and no room; B (newer) decodes within its block. B's
  // token is planned first, then A's piece needs B's block: B is preempted, A goes on.
  const std::vector<RunningSequenceInfo> running = {
      {.id = 1, .prompt_tokens_left = 4, .position = 4, .table_blocks = 1},
      {.id = 2, .prompt_tokens_left = 0, .position = 2, .table_blocks = 1}};
  const std::vector<WaitingRequestInfo> waiting = {{3, 1}};
  const StepPlan plan =
      PlanStep(running, waiting, {.free_slots = 1, .free_blocks = 0, .prefill_tokens = 16},
               {.block_size = 4});
  EXPECT_EQ(plan.preempt, (std::vector<RequestId>{2}));
  EXPECT_TRUE(plan.decode.empty());
  EXPECT_EQ(plan.prefill, (std::vector<std::pair<RequestId, int64_t>>{{1, 4}}));
  EXPECT_TRUE(plan.admit.empty());  // nothing is admitted past a preempted sequence
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

TEST(SchedulerBlocksTest, AHitIsAdmittedWithOnlyTheBlocksItsRestNeeds) {
  // Blocks of 4, 2 free. A 20-token prompt with 13 tokens cached (3 shared blocks, the partly
  // filled fourth copied) needs 2 new blocks for positions 12-19: it is admitted, with its 7
  // remaining tokens; the same prompt without a hit (5 blocks) is not.
  const KvGeometry kv{.block_size = 4};
  const std::vector<WaitingRequestInfo> hit = {
      {.id = 1, .prompt_tokens = 7, .position = 13, .table_blocks = 3}};
  const StepPlan admitted =
      PlanStep({}, hit, {.free_slots = 1, .free_blocks = 2, .prefill_tokens = 64}, kv);
  EXPECT_EQ(admitted.admit, std::vector<RequestId>{1});
  ASSERT_EQ(admitted.prefill.size(), 1u);
  EXPECT_EQ(admitted.prefill[0].second, 7);
  const std::vector<WaitingRequestInfo> miss = {{.id = 2, .prompt_tokens = 20}};
  const StepPlan partial =
      PlanStep({}, miss, {.free_slots = 1, .free_blocks = 2, .prefill_tokens = 64}, kv);
  ASSERT_EQ(partial.prefill.size(), 1u);
  EXPECT_EQ(partial.prefill[0].second, 8);  // as far as its 2 blocks reach
}

}  // namespace
}  // namespace ridge
