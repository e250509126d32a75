#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/reference_gemm.h"
#include "reference/reference_moe.h"

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

// Infinite logits (softcap 0): exp(x - max) is NaN for x = max = +inf, and for every x of a row
// without a finite logit. A +inf logit takes all the weight (shared among the +inf ones); a row
// with no finite logit weighs every expert alike; NaN ranks as -inf.
TEST(Reference, RouteInfiniteLogits) {
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> logits = {
      inf,  0,    1,    2,     // one +inf: ids 0, 3; weights 1, 0
      1,    inf,  -2,   inf,   // two +inf: ids 1, 3; 1/2 each
      -inf, -inf, -inf, -inf,  // fully masked: ids 0, 1; 1/4 each, renormalized 1/2
      nan,  -inf, nan,  nan,   // NaN ranks as -inf: the same as masked
  };
  for (bool renorm : {false, true}) {
    const Routing r = route(logits, 4, 4, 2, 0.0, renorm);
    const std::vector<int> ids = {0, 3, 1, 3, 0, 1, 0, 1};
    const double masked = renorm ? 0.5 : 0.25;
    const std::vector<double> w = {1, 0, 0.5, 0.5, masked, masked, masked, masked};
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(r.ids[i], ids[i]) << "pair " << i << (renorm ? " renormalized" : "");
      EXPECT_DOUBLE_EQ(r.weights[i], w[i]) << "pair " << i << (renorm ? " renormalized" : "");
    }
  }
}

// The routing comparison the MoE tests and bench share: a different id or weight is found, a
// token whose top-k edge is a near-tie is skipped.
TEST(Reference, RoutingMismatchSkipsNearTiesOnly) {
  const std::vector<float> logits = {3, 1, 2, 0,   // ids 0, 2; margin 1 to the third
                                     1, 1, 0, 0};  // ids 0, 1 (tied with each other); margin 1
  const Routing r = route(logits, 2, 4, 2, 0.0, false);
  std::vector<int32_t> ids(r.ids.begin(), r.ids.end());
  std::vector<float> w(r.weights.begin(), r.weights.end());
  EXPECT_EQ(first_routing_mismatch(r, ids.data(), w.data(), 2, 2, 1e-6), -1);
  ids[3] = 2;  // token 1 slot 1
  EXPECT_EQ(first_routing_mismatch(r, ids.data(), w.data(), 2, 2, 1e-6), 3);
  ids[3] = r.ids[3];
  w[0] += 1e-3f;
  EXPECT_EQ(first_routing_mismatch(r, ids.data(), w.data(), 2, 2, 1e-6), 0);
  // With `tie` above every margin, no token is compared.
  EXPECT_EQ(first_routing_mismatch(r, ids.data(), w.data(), 2, 2, 1e-6, /*tie=*/2.0), -1);
}
