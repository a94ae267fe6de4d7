// A checkpoint's model against the config's, on resolved values (checkpoint/same_model.h): keys left at 0
// match the values they stand for, real differences are refused naming the key.
#include <gtest/gtest.h>

#include <string>

#include "odyssey/checkpoint/same_model.h"
#include "odyssey/core/error.h"

using namespace odyssey;

namespace {

ModelConfig small_llama() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.n_layer = 2, c.n_head = 4, c.d_model = 64, c.d_ff = 96, c.seq_len = 32, c.vocab_size = 256;
  return c;
}

std::string refusal(const ModelConfig& want, const ModelConfig& have) {
  try {
    check_same_model(want, have, "ck");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SameModel, DerivedKeysAtTheirDefaultsMatchTheRecordedValues) {
  const ModelConfig config = small_llama();  // head_dim 0 (16), n_kv_head 0 (4)
  ModelConfig imported = config;             // as an import records them
  imported.head_size = 16, imported.n_kv_head = 4;
  EXPECT_EQ(refusal(config, imported), "");
  EXPECT_EQ(refusal(imported, config), "");
  ModelConfig gpt2;  // d_ff 0 stands for 4 x d_model
  ModelConfig explicit_ff = gpt2;
  explicit_ff.d_ff = 4 * gpt2.d_model;
  EXPECT_EQ(refusal(explicit_ff, gpt2), "");
}

TEST(SameModel, RealDifferencesAreRefusedNamingTheKey) {
  const ModelConfig config = small_llama();
  ModelConfig other = config;
  other.head_size = 8;
  EXPECT_EQ(refusal(config, other), "checkpoint ck has model.head_dim=8, the config says 16");
  other = config, other.n_kv_head = 2;
  EXPECT_EQ(refusal(config, other), "checkpoint ck has model.n_kv_head=2, the config says 4");
  other = config, other.n_layer = 3;
  EXPECT_EQ(refusal(config, other), "checkpoint ck has model.n_layer=3, the config says 2");
}

}  // namespace
