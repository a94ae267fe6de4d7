// Per-op timing by callback: a block or stage calls the observer around every kernel it runs, so a
// profiler times the model's own code path instead of a replica of it. Null observer: no calls.
#pragma once

namespace odyssey {

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // name: "<kind>.<detail>", e.g. "gemm.fwd.qkv", "layernorm.bwd"; flops: of this call (0: not counted).
  virtual void begin_op(const char* name, double flops) = 0;
  virtual void end_op() = 0;
};

// Runs f between begin_op and end_op (just f without an observer).
template <typename F>
inline void observed(OpObserver* observer, const char* name, double flops, F&& f) {
  if (!observer) return f();
  observer->begin_op(name, flops);
  f();
  observer->end_op();
}

}  // namespace odyssey
