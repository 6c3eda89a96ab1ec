// Saved sessions: the file format refuses every damaged, truncated or foreign file with the
// reason; a request that names a session continues it exactly (the same tokens and logprobs as
// sending the whole history, on the CPU to the bit for a hybrid), one request at a time; a
// session written to disk and read back, in this engine or a new one (a restart), continues the
// same way; a file of another model or backend, or one past the model's context, is refused and
// changes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/session_file.h"
#include "models/arch/load_model.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/request_outcome.h"

namespace ridge {
namespace {

using testing::CollectingSink;

SessionFile SampleFile() {
  SessionFile f;
  f.model_fingerprint = "abc";
  f.state_format = "cpu/fp32";
  f.cache_space = "0/30/";
  f.tokens = {5, 6, 7, 8, 9};
  f.pending = {11};
  f.state = std::string(64, 'x');
  f.kv_block_size = 4;
  f.kv_blocks = {std::string(32, 'a'), std::string(32, 'b')};
  return f;
}

TEST(SessionFileTest, RoundTripsAndRefusesDamage) {
  const std::string bytes = SerializeSessionFile(SampleFile());
  auto back = ParseSessionFile(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, SampleFile().tokens);
  EXPECT_EQ(back->pending, SampleFile().pending);
  EXPECT_EQ(back->state, SampleFile().state);
  EXPECT_EQ(back->kv_blocks, SampleFile().kv_blocks);
  EXPECT_EQ(back->cache_space, "0/30/");
  // Every single-byte change and every truncation is caught.
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string altered = bytes;
    altered[i] ^= 0x20;
    EXPECT_FALSE(ParseSessionFile(altered).ok()) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{8}, size_t{40}, bytes.size() - 1}) {
    const auto cut = ParseSessionFile(bytes.substr(0, n));
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << cut.status();
  }
  EXPECT_NE(ParseSessionFile(bytes.substr(0, bytes.size() - 1)).status().message().find("checksum"),
            std::string::npos);
  std::string future = bytes;
  future[8] = 9;  // version 9
  EXPECT_EQ(ParseSessionFile(future).status().code(), absl::StatusCode::kFailedPrecondition);
}

using Outcome = testing::RequestOutcome;

Outcome RunToEnd(Engine& engine, std::vector<int32_t> prompt, int max_tokens,
                 const std::string& session = "") {
  return testing::RunToEnd(engine, testing::GreedyRequest(std::move(prompt), max_tokens, session,
                                                          /*top_logprobs=*/3));
}

void ExpectSame(const Outcome& got, const Outcome& want) {
  testing::ExpectSameOutcome(got, want, 0.0f, "continued vs whole history");
}

std::vector<int32_t> Tokens(int count, int seed) {
  return testing::PatternTokens(count, seed, 256);
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Blocks of 8 tokens; layers GKA-*-GKA-SWA (window 24): a state, KV blocks and a ring.
    auto model =
        LoadModel(std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / "gka_swa_mix",
                  LoadFormat::kCheckpoint, /*kv_block_size=*/8);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    dir_ = std::filesystem::temp_directory_path() /
           ("ridge_session_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Engine> Start(int64_t cache_slots = 4, std::string fingerprint = "model-a",
                                int64_t max_sessions = 0) {
    auto engine = Engine::Create(model_.get(),
                                 {.max_slots = 3,
                                  .prefix_cache_slots = cache_slots,
                                  .prefill_token_budget = 16,
                                  .max_sessions = max_sessions,
                                  .session_dir = dir_.string(),
                                  .model_fingerprint = std::move(fingerprint)},
                                 nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }
  std::filesystem::path File(const std::string& id) const { return dir_ / (id + ".ridgesession"); }

  std::unique_ptr<Model> model_;
  std::filesystem::path dir_;
};

TEST_F(SessionTest, ARequestContinuesItsSessionAsTheWholeHistoryWould) {
  auto engine = Start();
  auto plain = Start(/*cache_slots=*/0);
  const std::vector<int32_t> first = Tokens(20, 1), second = Tokens(6, 2), third = Tokens(9, 3);
  const Outcome one = RunToEnd(*engine, first, 5, "chat");
  ASSERT_TRUE(one.status.ok()) << one.status;
  std::vector<SessionInfo> listed = engine->ListSessions();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, "chat");
  EXPECT_EQ(listed[0].tokens, 25);  // the prompt and the whole answer
  // The next request sends only its new tokens.
  const Outcome two = RunToEnd(*engine, second, 4, "chat");
  std::vector<int32_t> history = first;
  history.insert(history.end(), one.tokens.begin(), one.tokens.end());
  history.insert(history.end(), second.begin(), second.end());
  ExpectSame(two, RunToEnd(*plain, history, 4));
  EXPECT_EQ(two.usage.prompt_tokens, 31);
  EXPECT_EQ(two.usage.cached_tokens, 24);  // the answer's last token was picked, never fed
  // Written to disk, deleted, read back: the third turn is the same as without the round trip.
  auto saved = engine->SaveSessionToDisk("chat");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->tokens, 35);
  EXPECT_TRUE(std::filesystem::exists(File("chat")));
  ASSERT_TRUE(engine->DeleteSession("chat").ok());
  EXPECT_TRUE(engine->ListSessions().empty());
  EXPECT_EQ(engine->DeleteSession("chat").code(), absl::StatusCode::kNotFound);
  auto loaded = engine->LoadSessionFromDisk("chat");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tokens, 35);
  history.insert(history.end(), two.tokens.begin(), two.tokens.end());
  history.insert(history.end(), third.begin(), third.end());
  const Outcome want = RunToEnd(*plain, history, 4);
  ExpectSame(RunToEnd(*engine, third, 4, "chat"), want);

  // After a restart (a new engine on the same model and folder) the file continues the same.
  engine.reset();
  auto restarted = Start();
  EXPECT_TRUE(restarted->ListSessions().empty());
  ASSERT_TRUE(restarted->LoadSessionFromDisk("chat").ok());
  ExpectSame(RunToEnd(*restarted, third, 4, "chat"), want);
}

TEST_F(SessionTest, OneRequestAtATimeAndALimitOnSessions) {
  auto engine = Start(/*cache_slots=*/4, "model-a", /*max_sessions=*/1);
  EngineRequest long_one;
  long_one.prompt = Tokens(30, 4);
  long_one.sampling.max_tokens = 600;  // still running while the calls below are made
  long_one.sampling.ignore_eos = true;
  long_one.session_id = "a";
  auto running = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(long_one, running).ok());
  running->WaitForTokens(2);
  const Outcome second = RunToEnd(*engine, Tokens(3, 5), 2, "a");
  EXPECT_EQ(second.status.code(), absl::StatusCode::kFailedPrecondition) << second.status;
  EXPECT_NE(second.status.message().find("in use"), std::string::npos);
  const Outcome other = RunToEnd(*engine, Tokens(3, 5), 2, "b");
  EXPECT_EQ(other.status.code(), absl::StatusCode::kResourceExhausted) << other.status;
  EXPECT_EQ(engine->DeleteSession("a").code(), absl::StatusCode::kNotFound);  // not saved yet
  EXPECT_TRUE(running->Wait().status.ok());
  EXPECT_EQ(engine->ListSessions().size(), 1u);
  // Bad ids, and sessions without a prefix cache, are refused up front.
  EXPECT_EQ(RunToEnd(*engine, Tokens(3, 5), 2, "../etc").status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->SaveSessionToDisk(".hidden").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto uncached = Start(/*cache_slots=*/0);
  EXPECT_EQ(RunToEnd(*uncached, Tokens(3, 5), 2, "a").status.code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SessionTest, TwoSessionsOnOneStateAndSaltsThatDiffer) {
  // Two sessions end at the same state (the same greedy turn): one moving on must not free it
  // under the other, however many other states then pass through the cache.
  auto engine = Start(/*cache_slots=*/6);
  const std::vector<int32_t> prompt = Tokens(20, 8);
  ASSERT_TRUE(RunToEnd(*engine, prompt, 4, "a").status.ok());
  ASSERT_TRUE(RunToEnd(*engine, prompt, 4, "b").status.ok());
  ASSERT_TRUE(RunToEnd(*engine, Tokens(5, 9), 3, "a").status.ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(RunToEnd(*engine, Tokens(30, 20 + i), 2).status.ok());
  const Outcome b = RunToEnd(*engine, Tokens(5, 10), 3, "b");
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.usage.cached_tokens, 23);
  EXPECT_EQ(b.usage.prompt_tokens, 29);
  // A session continues only under the salt and solver budget it was made with.
  EngineRequest salted = testing::GreedyRequest(Tokens(3, 11), 2, "b");
  salted.cache_salt = "tenant";
  const Outcome refused = testing::RunToEnd(*engine, salted);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kFailedPrecondition) << refused.status;
  EXPECT_NE(refused.status.message().find("cache_salt"), std::string::npos);
}

TEST_F(SessionTest, ASessionThatLostItsTurnSaysSoInsteadOfContinuingAnOlderState) {
  // 8 blocks of 8 tokens: sessions may pin 4 (32 tokens). The first turn (20 + 4) is kept; the
  // second (24 + 6 new + 6 answered) would pin 5 blocks and cannot be.
  auto created = Engine::Create(model_.get(),
                                {.max_slots = 3,
                                 .cpu_kv_blocks = 8,
                                 .prefix_cache_slots = 4,
                                 .prefill_token_budget = 16,
                                 .session_dir = dir_.string()},
                                nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  Engine& engine = **created;
  ASSERT_TRUE(RunToEnd(engine, Tokens(20, 12), 4, "tight").status.ok());
  ASSERT_EQ(engine.ListSessions().size(), 1u);
  ASSERT_TRUE(RunToEnd(engine, Tokens(6, 13), 6, "tight").status.ok());  // answered, not kept
  EXPECT_TRUE(engine.ListSessions().empty());
  const Outcome next = RunToEnd(engine, Tokens(3, 14), 2, "tight");
  EXPECT_EQ(next.status.code(), absl::StatusCode::kFailedPrecondition) << next.status;
  EXPECT_NE(next.status.message().find("lost its last turn"), std::string::npos) << next.status;
  // Said once: the id starts a new session afterwards.
  EXPECT_TRUE(RunToEnd(engine, Tokens(10, 15), 2, "tight").status.ok());
  EXPECT_EQ(engine.ListSessions().size(), 1u);
}

TEST_F(SessionTest, FilesThatDoNotFitAreRefusedAndChangeNothing) {
  auto engine = Start();
  ASSERT_TRUE(RunToEnd(*engine, Tokens(20, 6), 3, "keep").status.ok());
  ASSERT_TRUE(engine->SaveSessionToDisk("keep").ok());
  std::ifstream in(File("keep"), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& id, const std::string& bytes) {
    std::ofstream(File(id), std::ios::binary) << bytes;
  };
  auto refused = [&](const std::string& id, absl::StatusCode code, const std::string& words) {
    const auto loaded = engine->LoadSessionFromDisk(id);
    ASSERT_FALSE(loaded.ok()) << id;
    EXPECT_EQ(loaded.status().code(), code) << loaded.status();
    EXPECT_NE(loaded.status().message().find(words), std::string::npos) << loaded.status();
  };
  write("truncated", good.substr(0, good.size() / 2));
  refused("truncated", absl::StatusCode::kDataLoss, "checksum");
  std::string altered = good;
  altered[good.size() / 2] ^= 1;
  write("altered", altered);
  refused("altered", absl::StatusCode::kDataLoss, "checksum");
  refused("missing", absl::StatusCode::kNotFound, "no session file");
  SessionFile file = *ParseSessionFile(good);
  file.state_format = "cuda-hybrid/fp32+kv-bf16";
  write("other_backend", SerializeSessionFile(file));
  refused("other_backend", absl::StatusCode::kFailedPrecondition, "stored as");
  file = *ParseSessionFile(good);
  file.tokens.resize(5000, 1);  // the model's context is 4096
  file.kv_blocks.resize(625, file.kv_blocks[0]);
  write("too_long", SerializeSessionFile(file));
  refused("too_long", absl::StatusCode::kOutOfRange, "context of 4096");
  file = *ParseSessionFile(good);
  file.kv_blocks.pop_back();
  write("few_blocks", SerializeSessionFile(file));
  refused("few_blocks", absl::StatusCode::kDataLoss, "KV blocks");
  auto other_model = Start(4, "model-b");
  const auto foreign = other_model->LoadSessionFromDisk("keep");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.status().message().find("another model"), std::string::npos);
  // Nothing changed: the one session is there and still continues.
  ASSERT_EQ(engine->ListSessions().size(), 1u);
  EXPECT_TRUE(RunToEnd(*engine, Tokens(4, 7), 2, "keep").status.ok());
}

}  // namespace
}  // namespace ridge
