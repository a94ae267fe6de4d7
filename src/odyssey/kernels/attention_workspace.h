// The attention kernel's scratch (packed Q, dO, K, V and each thread's tiles): one block per calling
// thread, kept between calls instead of allocated and freed by every call. Freed, glibc hands a block
// this size back to the OS, and the next call faults every page in again: on the VMs here that cost
// as much as the kernel itself (AMD EPYC Zen 5, T = 1K, D = 64, one thread: backward 58.7 ms with a
// fresh block per call, 27.6 ms reusing it), and a 4-layer T = 4096 training step faulted in 170 MB
// per step. Blocks above kKeptWorkspaceBytes (T beyond ~32K tokens per rank at GPT-2's width) are
// freed after the call: there the quadratic work dwarfs the faults, and memory matters more.
//
// Compiled for the build's baseline ISA (attention.cpp's translation unit, not a path's), so the
// paths' target pragmas never reach the allocator code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace odyssey {

inline constexpr size_t kKeptWorkspaceBytes = size_t{512} << 20;

// At least `floats` floats, 64-byte aligned, of the calling thread's workspace; contents are whatever
// the previous call left (a kernel writes every float it reads). Not reentrant: one kernel call per
// thread at a time uses it.
float* attention_workspace(int64_t floats);
// Ends a call's use: frees the workspace when it is larger than kKeptWorkspaceBytes.
void attention_workspace_done();
// Frees the calling thread's workspace now; attention_workspace_bytes() is what it holds.
void attention_workspace_release();
size_t attention_workspace_bytes();

}  // namespace odyssey
