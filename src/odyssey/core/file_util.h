// Files written so a crash never leaves a half-written one under the final name: write to
// "<path>.tmp.<pid>", fsync, rename.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace odyssey {

void write_file_atomic(const std::string& path, const void* data, size_t bytes);
void write_text_atomic(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);
std::vector<uint8_t> read_binary_file(const std::string& path);
// fsync a directory so a rename inside it is durable.
void fsync_dir(const std::string& dir);

}  // namespace odyssey
