#include "odyssey/comm/communicator.h"

#include "odyssey/core/error.h"

namespace odyssey {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::u8:
      return 1;
  }
  fail("unknown dtype {}", static_cast<int>(t));
}

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
