// Model sizes and architecture options (the [model] section of the config). GPT-2 uses the first
// block of keys; Llama (spec §5.1) adds the second.
#pragma once

#include <cstdint>
#include <string>

#include "odyssey/core/enum_names.h"

namespace odyssey {

// model.arch: each architecture has one registry entry (model/architecture.h).
enum class Arch { gpt2, llama, qwen2 };
inline constexpr EnumNames<Arch, 3> kArchNames = {
    {{"gpt2", Arch::gpt2}, {"llama", Arch::llama}, {"qwen2", Arch::qwen2}}};

// model.rope_scaling.rope_type: none (the empty string, as Hugging Face's absent rope_scaling) or Llama-3's.
enum class RopeType { none, llama3 };
inline constexpr EnumNames<RopeType, 2> kRopeTypeNames = {
    {{"", RopeType::none}, {"llama3", RopeType::llama3}}};

// Llama-3 frequency scaling of RoPE (spec §5.5).
struct RopeScaling {
  RopeType rope_type = RopeType::none;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
  bool enabled() const { return rope_type != RopeType::none; }
  bool operator==(const RopeScaling&) const = default;
};

// The most layers a model may have: the tables and stages are built per layer, and a dry run must
// answer at once (issue 42).
inline constexpr int kMaxLayers = 4096;

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int n_layer = 12;
  int n_head = 12;
  int d_model = 768;
  int seq_len = 1024;  // context length (GPT-2: rows of the position table, HF's n_positions)
  int vocab_size = 50257;

  // Llama keys. GPT-2 refuses the shape keys when set (its shapes are fixed by d_model and n_head)
  // and ignores the others: it always ties its embeddings, has no RoPE and uses LayerNorm eps 1e-5.
  int n_kv_head = 0;  // key/value heads (GQA); 0: n_head
  int d_ff = 0;       // MLP width; 0: 4 * d_model (GPT-2); Llama requires it
  int head_size = 0;  // model.head_dim; 0: d_model / n_head
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;

  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int ffn_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  // Fails naming the key when a size is impossible (non-positive, d_model % n_head != 0, ...).
  void validate() const;
  // Parameters of the model (tied embeddings counted once).
  int64_t num_parameters() const;
};

}  // namespace odyssey
