// Where a rank's training rows come from, as train_step sees them: the data loader in training
// (train/batch_loader.h), synthetic rows in the parity tests and benchmarks.
#pragma once

#include <cstdint>

namespace odyssey {

class MicroBatches {
 public:
  virtual ~MicroBatches() = default;
  virtual int rows() const = 0;       // rows per micro-step on this rank
  virtual int local_len() const = 0;  // tokens per row on this rank
  // Global positions of the local tokens [local_len()] (null: 0 .. local_len()-1).
  virtual const int* positions() const = 0;
  // inputs, targets: [rows(), local_len()] for micro-step `micro` of optimizer step `step` (0-based).
  virtual void load(int64_t step, int micro, int* inputs, int* targets) = 0;
};

}  // namespace odyssey
