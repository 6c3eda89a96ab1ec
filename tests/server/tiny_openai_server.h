// A test fixture: the OpenAI HTTP routes over the scripted fake engine (fake_backend.h) with the
// tiny byte-level tokenizer and its chat template; model "tiny", a vocabulary of 512, prompts of
// at most 100 tokens. client_ talks to it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "server/http_server.h"
#include "tests/server/fake_backend.h"
#include "tests/server/http_test_client.h"
#include "tests/server/running_http_server.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge::testing {

class TinyOpenAiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = *Tokenizer::FromJson(TinyTokenizerJson().dump(), TinyTokenizerConfigJson().dump());
    auto chat = LoadChatTemplate(tokenizer_->config());
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = std::make_unique<ChatTemplate>(*chat);
    HttpServerOptions options;
    options.model_id = "tiny";
    options.limits.vocab_size = 512;
    options.max_prompt_tokens = 100;
    running_ = RunningHttpServer::Start(&backend_, tokenizer_.get(), chat_.get(), nullptr, options);
    ASSERT_NE(running_, nullptr);
    client_ = running_->Client();
  }

  FakeBackend backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<RunningHttpServer> running_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace ridge::testing
