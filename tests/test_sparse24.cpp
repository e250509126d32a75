#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/sparse24.h"
#include "test_seed.h"

using namespace lowbit::formats;

TEST(Sparse24, PruneKeepsTwoLargestWithLowerIndexOnTies) {
  std::vector<float> x = {1, -5, 3, 2,   /**/ 2, 2, 2, 2,   /**/ 0, 0, 0, 7,   /**/ -1, 4, -4, 0};
  prune_2_4(x.data(), 1, 16);
  const std::vector<float> want = {0, -5, 3, 0, /**/ 2, 2, 0, 0, /**/ 0, 0, 0, 7, /**/ 0, 4, -4, 0};
  EXPECT_EQ(x, want);
  EXPECT_TRUE(check_2_4(x.data(), 1, 16).ok);
}

TEST(Sparse24, CheckerReportsTheFirstViolatingGroup) {
  std::vector<float> x(3 * 16, 0.0f);
  x[1 * 16 + 8] = 1;
  x[1 * 16 + 9] = 1;
  x[1 * 16 + 10] = 1;  // row 1, group 2: three nonzeros
  x[2 * 16 + 0] = x[2 * 16 + 1] = x[2 * 16 + 2] = x[2 * 16 + 3] = 1;  // a later, denser one
  const auto v = check_2_4(x.data(), 3, 16);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.row, 1);
  EXPECT_EQ(v.group, 2);
  EXPECT_EQ(v.nonzeros, 3);
}

TEST(Sparse24, CompressRoundTripsPrunedRandomMatrices) {
  const uint64_t seed = lowbit_test::seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 37, cols = 128;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = (rng() % 5 == 0) ? 0.0f : nd(rng);  // some groups end up with < 2 nonzeros
  prune_2_4(x.data(), rows, cols);
  ASSERT_TRUE(check_2_4(x.data(), rows, cols).ok);
  const auto c = compress_2_4(x.data(), rows, cols);
  for (uint8_t idx : c.indices) ASSERT_LT(idx & 3, (idx >> 2) & 3) << "indices distinct and increasing";
  EXPECT_EQ(decompress_2_4(c), x) << "seed " << seed;
}

TEST(Sparse24, EmptyAndSingleNonzeroGroups) {
  std::vector<float> x = {0, 0, 0, 0, /**/ 0, 0, 9, 0, /**/ 5, 0, 0, 0};
  const auto c = compress_2_4(x.data(), 1, 12);
  EXPECT_EQ(c.indices[0], 0 | (1 << 2));
  EXPECT_EQ(c.indices[1], 0 | (2 << 2));
  EXPECT_EQ(c.indices[2], 0 | (1 << 2));
  EXPECT_EQ(decompress_2_4(c), x);
}
