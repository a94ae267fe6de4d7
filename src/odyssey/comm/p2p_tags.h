// The registry of point-to-point tags. Every send/recv (and their async forms) above comm/ names its
// tag here, so two features that exchange messages on one communicator can never match each other's
// messages by accident. Add a feature's tags at the end of the list; the enumerators number
// themselves, so a tag cannot be reused.
#pragma once

namespace odyssey {

namespace p2p_tag {
enum : int {
  // ZeroEngine::gather_params_to_root: every dp rank sends its local slices of the parameters to
  // rank 0, one message per rank.
  zero_gather_params,
  // Ring attention: forward K/V blocks passed to the next ring rank; backward dK/dV accumulators.
  ring_kv,
  ring_dkv,
  // Pipeline parallelism: a stage's output to the next stage's rank; d(input) back to the previous.
  // Between two ranks each direction's messages are received in the order they are sent (checked by
  // validate_schedule), so one tag per direction suffices.
  pp_activation,
  pp_gradient,

  count  // the first unused tag
};
}  // namespace p2p_tag

// MPI guarantees tags up to 32767. Tags 0..kMaxP2pTag are for the features above; kMaxP2pTag + 1 is
// MpiCommunicator's own, for the point-to-point pieces of chunked all-to-alls.
constexpr int kMaxP2pTag = 32766;
static_assert(p2p_tag::count - 1 <= kMaxP2pTag, "more point-to-point tags than MPI guarantees");

}  // namespace odyssey
