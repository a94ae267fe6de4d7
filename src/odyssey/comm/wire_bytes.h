// The bytes that cross between hosts, counted where they leave: each rank's TCP connections to ranks
// on other hosts. The bus-byte accounting (comm_stats.h) says what an algorithm must move in the
// nccl-tests convention; this says what Open MPI's algorithms actually put on the network, whatever
// the algorithm it chose (a ring, a binomial tree, reduce-then-scatter), with the TCP transport's own
// fragment headers, and nothing of the traffic between ranks of one host (shared memory, loopback).
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "odyssey/comm/communicator.h"

namespace odyssey {

// Payload bytes this process has sent over its TCP connections to other hosts since each connection
// opened (Linux TCP_INFO's tcpi_bytes_sent, retransmissions included). A connection is to another host
// when its peer address is neither loopback nor the connection's own local address. 0 where the
// kernel has no such counter.
uint64_t tcp_bytes_sent_to_other_hosts();

// Whether a TCP connection from local to peer leaves the host (the rule above; IPv4 or IPv6).
bool tcp_peer_on_other_host(const sockaddr_storage& local, const sockaddr_storage& peer);

// Steps' inter-host bytes summed over every rank of the job: start() before the first step, take()
// after each (collective over world, plain MPI so it adds nothing to the step's CommStats): what was
// sent since the last reading, which becomes the next step's start. The readings are back to back, so
// bytes that a communication thread sends between two steps (ZeRO 1-2's after-step gathers) count in
// the next step, and the steps' figures add up to the run's.
class InterNodeSentBytes {
 public:
  void start() { start_ = tcp_bytes_sent_to_other_hosts(); }
  uint64_t take(const Communicator& world);

 private:
  uint64_t start_ = 0;
};

}  // namespace odyssey
