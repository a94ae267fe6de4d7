#include "odyssey/comm/communicator.h"

#include "odyssey/core/error.h"

namespace odyssey {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  fail("unknown reduction operator {}", static_cast<int>(op));
}

}  // namespace odyssey
