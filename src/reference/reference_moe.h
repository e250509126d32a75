// CPU oracle of the fused MoE (lowbit/moe.h), in FP64 on the same quantized operands.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::reference {

// Routing of one batch: for each token the top-k experts of softmax(softcap(logits)), larger
// first, ties to the lower id, weights optionally renormalized. `value` keeps each pick's
// softcapped logit and `margin` each token's gap between its k-th and (k+1)-th logit, so a test
// can tell a real mismatch from two logits that FP32 and FP64 round into a different order.
struct Routing {
  std::vector<int32_t> ids;      // [m, top_k]
  std::vector<double> weights;   // [m, top_k]
  std::vector<double> margin;    // [m]
};
Routing route(const std::vector<float>& logits, int m, int experts, int top_k, double softcap, bool renormalize);

// The first pair (t * top_k + j) whose id or weight (beyond `weight_tol`) differs from `r`, or -1.
// Tokens whose k-th and (k+1)-th logits lie closer than `tie` are skipped: the device's FP32
// softcap may order them the other way.
int64_t first_routing_mismatch(const Routing& r, const int32_t* ids, const float* weights, int m, int top_k,
                               double weight_tol, double tie = 1e-5);

// Y[t][c] = sum_j weight(t, j) * sum_kb xs[t][kb] * ws[e][c / 128][kb] * sum_{k in kb} xq[t][k] * w[e][c][k]
// over the token's routed experts e = ids[t][j] (ids outside [0, experts) add nothing).
struct MoeProblem {
  int m = 0, n = 0, k = 0, experts = 0, top_k = 0;
  const float* xq = nullptr;       // [m, k] decoded E4M3 activations
  const float* x_scales = nullptr; // [m, k / 128]
  const float* w = nullptr;        // [experts, n, k] decoded E4M3 weights
  const float* w_scales = nullptr; // [experts, ceil(n / 128), k / 128]
  const int32_t* ids = nullptr;    // [m, top_k]
  const float* weights = nullptr;  // [m, top_k]
};
std::vector<double> moe_full(const MoeProblem& p);

}  // namespace lowbit::reference
