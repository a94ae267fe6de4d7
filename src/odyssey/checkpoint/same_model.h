// Whether a checkpoint's model is the configured one: compared key by key on resolved values, so that a
// key left at its default (model.head_dim = 0: d_model / n_head; model.n_kv_head = 0: n_head;
// model.d_ff = 0: GPT-2's 4 * d_model) matches a checkpoint that recorded the value it stands for
// (Hugging Face imports record them all).
#pragma once

#include <string>

#include "odyssey/model/config.h"

namespace odyssey {

// The config with every derived size written out (head_dim, n_kv_head, d_ff as the model uses them).
ModelConfig resolved_model(const ModelConfig& config);

// Refuses to resume checkpoint `dir`, whose model is `have`, with a config whose model is `want`,
// naming the first key whose resolved values differ.
void check_same_model(const ModelConfig& want, const ModelConfig& have, const std::string& dir);

}  // namespace odyssey
