// Helpers shared by the fuzz targets: the parsers under test read files by path, so each input is
// written into a scratch directory of this process first (one directory per fuzzing process, reused
// for every input), and errors the parsers are meant to raise (odyssey::Error) are expected outcomes.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace odyssey::fuzz {

// A directory under $TMPDIR (or /tmp) that lives as long as the process.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                              ("odyssey_fuzz." + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return dir;
}

// Writes bytes to <scratch>/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace odyssey::fuzz
