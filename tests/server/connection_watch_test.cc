// ConnectionWatch over a real loopback connection: it finds the accepted socket by the client's
// address and port, says nothing while the client is there (even with unread data), and reports
// the client gone once it closes.
#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ridge {
namespace {

TEST(ConnectionWatchTest, SeesTheClientLeave) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  sockaddr_in client_address{};
  length = sizeof(client_address);
  ASSERT_EQ(getsockname(client, reinterpret_cast<sockaddr*>(&client_address), &length), 0);

  ConnectionWatch watch("127.0.0.1", ntohs(client_address.sin_port));
  ASSERT_TRUE(watch.found());
  EXPECT_FALSE(watch.ClientGone());
  ASSERT_EQ(write(client, "GET / HTTP/1.1\r\n", 16), 16);  // a pipelined request, unread
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(watch.ClientGone());
  close(client);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = watch.ClientGone();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);

  ConnectionWatch nobody("127.0.0.1", 1);
  EXPECT_FALSE(nobody.found());
  EXPECT_FALSE(nobody.ClientGone());
  close(accepted);
  close(listener);
}

}  // namespace
}  // namespace ridge
