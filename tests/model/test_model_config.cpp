// ModelConfig::validate: the vocabulary has no upper bound of its own (the token-shard format carries
// the width), so a Llama-3-sized vocabulary validates; impossible sizes still fail naming the key.
#include <gtest/gtest.h>

#include <string>

#include "odyssey/core/error.h"
#include "odyssey/model/config.h"

namespace odyssey {
namespace {

TEST(ModelConfig, LargeVocabularyValidates) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.d_model = 64, c.seq_len = 32;
  for (int vocab : {1, 256, 50257, 65536, 65537, 128256}) {
    c.vocab_size = vocab;
    EXPECT_NO_THROW(c.validate()) << vocab;
  }
  // Tied embeddings counted once: the vocabulary's share of the parameters is V x d_model.
  c.vocab_size = 128256;
  const int64_t wide = c.num_parameters();
  c.vocab_size = 256;
  EXPECT_EQ(wide - c.num_parameters(), int64_t(128256 - 256) * 64);
}

TEST(ModelConfig, NonPositiveVocabularyIsRefused) {
  ModelConfig c;
  for (int vocab : {0, -5}) {
    c.vocab_size = vocab;
    try {
      c.validate();
      ADD_FAILURE() << "vocab_size " << vocab << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.vocab_size"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace odyssey
