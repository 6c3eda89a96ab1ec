// TLS on both transports of the real `ridgeserve serve` (tests/data/tls: a test CA, a server
// certificate for 127.0.0.1 and a client certificate): HTTPS and gRPC over TLS answer a client
// that trusts the CA and refuse plain text; with --ssl-ca-certs a client without a certificate
// is refused and one with a certificate is served; bad TLS files stop the start-up with a message
// naming the flag. Also LoadTlsOptions' checks one by one.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "server/tls_options.h"
#include "tests/integration/server_process.h"
#include "tests/support/run_command.h"

namespace ridge {
namespace {

using testing::ServerProcess;

const std::filesystem::path kModel =
    std::filesystem::path(RIDGE_TEST_DATA_DIR) / "mesanet" / "d64_untied";
const std::filesystem::path kTls = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "tls";

std::string Path(const char* name) { return (kTls / name).string(); }

std::filesystem::path TempDir() {
  static const std::filesystem::path dir = [] {
    auto d =
        std::filesystem::temp_directory_path() / ("ridge_tls_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// An HTTPS client that trusts the test CA and, when `with_certificate`, presents the client's.
std::unique_ptr<httplib::SSLClient> HttpsClient(int port, bool with_certificate) {
  auto client = with_certificate ? std::make_unique<httplib::SSLClient>(
                                       "127.0.0.1", port, Path("client.pem"), Path("client.key"))
                                 : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
  client->set_ca_cert_path(Path("ca.pem").c_str());
  client->enable_server_certificate_verification(true);
  client->set_read_timeout(60, 0);
  return client;
}

std::unique_ptr<ServerProcess> StartTlsServer(const std::vector<std::string>& extra,
                                              const std::string& name, bool client_certificates) {
  std::vector<std::string> args = {
      "--model",        kModel.string(),    "--threads",     "1",
      "--ssl-certfile", Path("server.pem"), "--ssl-keyfile", Path("server.key")};
  if (client_certificates) args.insert(args.end(), {"--ssl-ca-certs", Path("ca.pem")});
  args.insert(args.end(), extra.begin(), extra.end());
  signal(SIGPIPE, SIG_IGN);
  std::string error;
  auto server = ServerProcess::Start(RIDGESERVE_BINARY, args, TempDir() / (name + ".log"), &error,
                                     std::chrono::seconds(60), [client_certificates](int port) {
                                       auto ready =
                                           HttpsClient(port, client_certificates)->Get("/ready");
                                       return ready && ready->status == 200;
                                     });
  EXPECT_NE(server, nullptr) << error;
  return server;
}

constexpr char kCompletion[] =
    R"({"model":"d64_untied","prompt":[1,2,3],"max_tokens":4,"temperature":0,)"
    R"("return_token_ids":true})";

TEST(TlsTest, HttpsAndGrpcOverTls) {
  auto server = StartTlsServer({"--grpc-port", "0"}, "tls", false);
  ASSERT_NE(server, nullptr);
  const int grpc_port = server->GrpcPort();
  ASSERT_NE(grpc_port, 0) << server->Log();
  EXPECT_NE(server->Log().find("on https://127.0.0.1:"), std::string::npos) << server->Log();

  auto https = HttpsClient(server->port(), false);
  auto answer = https->Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_NE(answer->body.find("\"token_ids\""), std::string::npos) << answer->body;

  // Plain HTTP to the TLS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", server->port());
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/health");
  EXPECT_TRUE(!refused || refused->status != 200);

  // A client that does not trust the CA refuses the server.
  httplib::SSLClient untrusting("127.0.0.1", server->port());
  untrusting.enable_server_certificate_verification(true);
  untrusting.set_ca_cert_path("/nonexistent-ca.pem");
  EXPECT_FALSE(untrusting.Get("/health"));

#ifdef RIDGE_GRPC_CLIENT
  const auto grpc = [&](const std::string& flags) {
    return testing::RunCommand(
        std::string(RIDGE_GRPC_CLIENT) + " --address 127.0.0.1:" + std::to_string(grpc_port) +
        " --prompt-ids 1,2,3 --max-tokens 4 --temperature 0 --timeout 60 " + flags);
  };
  const auto [tls_code, tls_text] = grpc("--tls-ca " + Path("ca.pem"));
  EXPECT_EQ(tls_code, 0) << tls_text;
  const auto [plain_code, plain_text] = grpc("");
  EXPECT_NE(plain_code, 0) << plain_text;
#endif
}

TEST(TlsTest, ClientCertificatesAreRequiredWithACa) {
  auto server = StartTlsServer({}, "mtls", true);
  ASSERT_NE(server, nullptr);
  auto with =
      HttpsClient(server->port(), true)->Post("/v1/completions", kCompletion, "application/json");
  ASSERT_TRUE(with) << httplib::to_string(with.error());
  EXPECT_EQ(with->status, 200) << with->body;
  EXPECT_FALSE(HttpsClient(server->port(), false)->Get("/health"));
}

TEST(TlsTest, BadTlsFilesStopTheStartUp) {
  const auto run = [](const std::vector<std::string>& flags) {
    std::string command = std::string(RIDGESERVE_BINARY) + " serve --model " + kModel.string() +
                          " --http-port 0 --host 127.0.0.1";
    for (const std::string& f : flags) command += " " + f;
    return testing::RunCommand(command);
  };
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--ssl-certfile", Path("server.pem")}, "give both or neither"},
      {{"--ssl-certfile", Path("server.pem"), "--ssl-keyfile", Path("client.key")},
       "is not the key of the certificate"},
      {{"--ssl-certfile", Path("server.pem"), "--ssl-keyfile", "/nonexistent.key"},
       "/nonexistent.key: cannot read"},
      {{"--ssl-certfile", Path("server.key"), "--ssl-keyfile", Path("server.key")},
       "not a PEM file holding CERTIFICATE"},
      {{"--ssl-ca-certs", Path("ca.pem")}, "--ssl-ca-certs needs --ssl-certfile"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto [code, text] = run(flags);
    EXPECT_NE(code, 0) << text;
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(TlsOptionsTest, ChecksEachFile) {
  auto good = LoadTlsOptions(Path("server.pem"), Path("server.key"), Path("ca.pem"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->enabled());
  EXPECT_TRUE(good->verify_clients());
  EXPECT_NE(good->cert_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  auto none = LoadTlsOptions("", "", "");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->enabled());

  const std::filesystem::path garbled = TempDir() / "garbled.pem";
  std::ofstream(garbled) << "-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                            "-----END CERTIFICATE-----\n";
  auto bad_cert = LoadTlsOptions(garbled.string(), Path("server.key"), "");
  ASSERT_FALSE(bad_cert.ok());
  EXPECT_NE(bad_cert.status().message().find("not a valid certificate"), std::string::npos)
      << bad_cert.status();
  auto bad_ca = LoadTlsOptions(Path("server.pem"), Path("server.key"), garbled.string());
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_NE(bad_ca.status().message().find("--ssl-ca-certs"), std::string::npos) << bad_ca.status();
  auto only_key = LoadTlsOptions("", Path("server.key"), "");
  EXPECT_FALSE(only_key.ok());
}

}  // namespace
}  // namespace ridge
