#include "odyssey/kernels/attention_workspace.h"

#include "odyssey/core/buffer.h"

namespace odyssey {
namespace {
AlignedBuffer<float>& workspace() {
  thread_local AlignedBuffer<float> buffer;
  return buffer;
}
}  // namespace

float* attention_workspace(int64_t floats) {
  return workspace().at_least(static_cast<size_t>(floats > 0 ? floats : 1));
}

void attention_workspace_done() {
  if (workspace().bytes() > kKeptWorkspaceBytes) attention_workspace_release();
}

void attention_workspace_release() {
  workspace().resize(0);
}

size_t attention_workspace_bytes() {
  return workspace().bytes();
}

}  // namespace odyssey
