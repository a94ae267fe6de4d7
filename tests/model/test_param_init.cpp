// Initialisation by range: any range of the flat buffer gets exactly the values the whole-buffer fill
// puts there (ranges cutting through tensors, at odd offsets), and nothing outside it is touched.
#include <gtest/gtest.h>

#include <vector>

#include "odyssey/model/params.h"

namespace odyssey {
namespace {

TEST(ParamInit, ARangeGetsTheWholeFillsValuesAndTouchesNothingElse) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 5, c.d_model = 35, c.seq_len = 38, c.vocab_size = 67;
  const ParamTable table(c);
  const int64_t P = table.total();
  std::vector<float> whole(static_cast<size_t>(P));
  init_parameters(whole.data(), table, c, 1234);
  for (auto [b, e] :
       {std::pair<int64_t, int64_t>{0, P}, {1, 2}, {17, 4000}, {P / 3, P / 3 + 1001}, {P - 5, P}}) {
    std::vector<float> part(size_t(P), -7.0f);
    init_parameter_range(part.data(), table, c, 1234, b, e);
    for (int64_t i = 0; i < P; ++i)
      ASSERT_EQ(part[size_t(i)], i >= b && i < e ? whole[size_t(i)] : -7.0f)
          << "element " << i << ", range [" << b << ", " << e << ")";
  }
}

}  // namespace
}  // namespace odyssey
