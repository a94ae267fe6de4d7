// The inter-host byte counter without MPI: which connections count, and a loopback connection that
// carries a megabyte adds nothing (tests/multihost/wire_bytes.sh checks the counter across hosts).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "odyssey/comm/wire_bytes.h"

namespace odyssey {
namespace {

sockaddr_storage wire_v4(const char* address) {
  sockaddr_storage s{};
  auto& a = reinterpret_cast<sockaddr_in&>(s);
  a.sin_family = AF_INET;
  inet_pton(AF_INET, address, &a.sin_addr);
  return s;
}

sockaddr_storage wire_v6(const char* address) {
  sockaddr_storage s{};
  auto& a = reinterpret_cast<sockaddr_in6&>(s);
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, address, &a.sin6_addr);
  return s;
}

TEST(WireBytes, OtherHostIsNeitherLoopbackNorOwnAddress) {
  EXPECT_TRUE(tcp_peer_on_other_host(wire_v4("10.213.0.1"), wire_v4("10.213.0.2")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v4("10.213.0.1"), wire_v4("10.213.0.1")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v4("127.0.0.1"), wire_v4("127.0.0.1")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v4("10.213.0.1"), wire_v4("127.0.1.1")));
  EXPECT_TRUE(tcp_peer_on_other_host(wire_v6("fd00::1"), wire_v6("fd00::2")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v6("fd00::1"), wire_v6("fd00::1")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v6("::1"), wire_v6("::1")));
  EXPECT_FALSE(tcp_peer_on_other_host(wire_v6("::ffff:10.0.0.1"), wire_v6("::ffff:127.0.0.1")));
}

TEST(WireBytes, LoopbackTrafficDoesNotCount) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_storage addr = wire_v4("127.0.0.1");
  socklen_t len = sizeof(sockaddr_in);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint64_t before = tcp_bytes_sent_to_other_hosts();
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), len), 0);
  const int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  std::thread reader([server] {
    std::vector<char> buf(1 << 16);
    while (read(server, buf.data(), buf.size()) > 0) {
    }
  });
  const std::vector<char> data(1 << 20, 'x');
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = write(client, data.data() + sent, data.size() - sent);
    ASSERT_GT(n, 0);
    sent += size_t(n);
  }
  EXPECT_EQ(tcp_bytes_sent_to_other_hosts(), before);
  close(client);
  reader.join();
  close(server);
  close(listener);
}

}  // namespace
}  // namespace odyssey
