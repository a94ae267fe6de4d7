// The tensor view: element sizes per dtype (bf16 two bytes), byte counts, and which strides are
// contiguous.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "odyssey/core/tensor_view.h"

using namespace odyssey;

TEST(TensorView, ElementSizesAndBytes) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  std::vector<uint16_t> data(6 * 7);
  const TensorView v(data.data(), DType::bf16, {6, 7});
  EXPECT_EQ(v.numel(), 42);
  EXPECT_EQ(v.bytes(), 84u);
  EXPECT_EQ(v.device, Device::host);
  EXPECT_EQ(flat_view(data.data(), DType::u8, 5).bytes(), 5u);
  EXPECT_EQ(enum_name(kDTypeNames, DType::bf16), std::string("bf16"));
}

TEST(TensorView, Contiguity) {
  float x[24];
  EXPECT_TRUE(TensorView(x, DType::f32, {2, 3, 4}).contiguous());
  EXPECT_TRUE(TensorView(x, DType::f32, {2, 3, 4}, {12, 4, 1}).contiguous());
  EXPECT_FALSE(TensorView(x, DType::f32, {2, 3, 2}, {12, 4, 1}).contiguous());  // every other column pair
  EXPECT_TRUE(TensorView(x, DType::f32, {1, 3, 4}, {99, 4, 1}).contiguous());   // a size-1 dimension's stride
}
