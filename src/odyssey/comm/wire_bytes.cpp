#include "odyssey/comm/wire_bytes.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "odyssey/comm/mpi_communicator.h"

namespace odyssey {

bool tcp_peer_on_other_host(const sockaddr_storage& local, const sockaddr_storage& peer) {
  if (local.ss_family != peer.ss_family) return true;
  if (peer.ss_family == AF_INET) {
    const auto& l = reinterpret_cast<const sockaddr_in&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
    if ((ntohl(p.sin_addr.s_addr) >> 24) == 127) return false;
    return l.sin_addr.s_addr != p.sin_addr.s_addr;
  }
  const auto& l = reinterpret_cast<const sockaddr_in6&>(local);
  const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
  if (IN6_IS_ADDR_LOOPBACK(&p.sin6_addr)) return false;
  if (IN6_IS_ADDR_V4MAPPED(&p.sin6_addr) && p.sin6_addr.s6_addr[12] == 127) return false;
  return std::memcmp(&l.sin6_addr, &p.sin6_addr, sizeof(in6_addr)) != 0;
}

uint64_t tcp_bytes_sent_to_other_hosts() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return 0;
  uint64_t total = 0;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    int type = 0, protocol = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(int(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof(protocol);
    if (getsockopt(int(fd), SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP)
      continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;  // a listening or unconnected socket
    if (!tcp_peer_on_other_host(local, peer)) continue;
    tcp_info info{};
    len = sizeof(info);
    // Kernels before 4.19 return a shorter tcp_info without the byte counters.
    if (getsockopt(int(fd), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent))
      continue;
    total += info.tcpi_bytes_sent;
  }
  closedir(dir);
  return total;
}

uint64_t InterNodeSentBytes::take(const Communicator& world) {
  const uint64_t now = tcp_bytes_sent_to_other_hosts();
  uint64_t mine = now - start_, sum = mine;
  start_ = now;
  if (const auto* mpi = dynamic_cast<const MpiCommunicator*>(&world))
    MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, mpi->handle());
  return sum;
}

}  // namespace odyssey
