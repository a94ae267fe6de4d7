// GPT-2 model sizes (the [model] section of the config).
#pragma once

#include <cstdint>
#include <string>

namespace odyssey {

struct ModelConfig {
  std::string arch = "gpt2";
  int n_layer = 12;
  int n_head = 12;
  int d_model = 768;
  int seq_len = 1024;  // context length: rows of the position table (Hugging Face's n_positions)
  int vocab_size = 50257;

  int head_dim() const { return d_model / n_head; }
  // Fails naming the key when a size is impossible (non-positive, d_model % n_head != 0, ...).
  void validate() const;
  // Parameters of the model (tied embeddings counted once).
  int64_t num_parameters() const;
};

}  // namespace odyssey
