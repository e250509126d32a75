#include <gtest/gtest.h>

#include <cmath>

#include "reference/reference_gemm.h"

using namespace lowbit::reference;

TEST(Reference, SmallKnownProduct) {
  // A = [[1,2,3],[4,5,6]], B = [[1,0,1],[0,1,0],[2,2,2]] -> A.B^T = [[4,2,12],[10,5,30]]
  const float a[] = {1, 2, 3, 4, 5, 6};
  const float b[] = {1, 0, 1, 0, 1, 0, 2, 2, 2};
  const float bias[] = {0.5f, -1.0f, 0.0f};
  GemmProblem p;
  p.m = 2;
  p.n = 3;
  p.k = 3;
  p.a = a;
  p.b = b;
  p.alpha = 2.0;
  p.bias = bias;
  const auto d = gemm_full(p);
  const double want[] = {8.5, 3, 24, 20.5, 9, 60};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d[i], want[i]) << i;
  EXPECT_EQ(gemm_element(p, 1, 2), 60.0);
}

TEST(Reference, CompareCountsNonFiniteAndNormwiseError) {
  const std::vector<double> ref = {1.0, 2.0, 2.0};
  const auto same = compare(ref, ref);
  EXPECT_EQ(same.rel_fro, 0.0);
  EXPECT_EQ(same.nonfinite, 0);
  const auto bad = compare(ref, {1.0, NAN, 2.0});
  EXPECT_EQ(bad.nonfinite, 1);
  const auto off = compare(ref, {1.0, 2.0, 2.3});
  EXPECT_NEAR(off.rel_fro, 0.1, 1e-12);
  EXPECT_NEAR(off.max_rel, 0.15, 1e-12);
}

TEST(Reference, EpilogueOrder) {
  // 1x1x1: a = 2, b = 3 -> 6; alpha 0.5 -> 3; + bias 1 -> 4; + row_bcast[row % 2] -> row 1 adds -5 -> -1;
  // SiLU(-1) = -1 / (1 + e); + residual 10.
  const float a[] = {2, 2}, b[] = {3}, bias[] = {1}, rb[] = {7, -5}, res[] = {10, 10};
  GemmProblem p;
  p.m = 2;
  p.n = 1;
  p.k = 1;
  p.a = a;
  p.b = b;
  p.alpha = 0.5;
  p.bias = bias;
  p.row_bcast = rb;
  p.row_period = 2;
  p.activation = 2;
  p.residual = res;
  EXPECT_DOUBLE_EQ(gemm_element(p, 0, 0), 11.0 / (1.0 + std::exp(-11.0)) + 10.0);
  EXPECT_DOUBLE_EQ(gemm_element(p, 1, 0), -1.0 / (1.0 + std::exp(1.0)) + 10.0);
  p.activation = 1;
  EXPECT_NEAR(gemm_element(p, 1, 0), -0.15865525393145707 + 10.0, 1e-15);
}
