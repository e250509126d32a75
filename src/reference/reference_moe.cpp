#include "reference/reference_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/parallel.h"

namespace lowbit::reference {

Routing route(const std::vector<float>& logits, int m, int experts, int top_k, double softcap, bool renormalize) {
  Routing r;
  r.ids.resize(static_cast<size_t>(m) * top_k);
  r.weights.resize(static_cast<size_t>(m) * top_k);
  r.margin.resize(static_cast<size_t>(m));
  std::vector<double> v(experts);
  std::vector<int> order(experts);
  for (int t = 0; t < m; ++t) {
    double mx = -INFINITY;
    for (int e = 0; e < experts; ++e) {
      double x = logits[static_cast<size_t>(t) * experts + e];
      if (softcap > 0.0) x = softcap * std::tanh(x / softcap);
      if (std::isnan(x)) x = -INFINITY;  // as the device ranks it (and a strict weak order for the sort)
      v[e] = x;
      mx = std::max(mx, x);
    }
    // exp(x - mx), with an infinite mx as the device takes it (moe::softmax_term): +inf logits
    // share all the weight; a row with no finite logit weighs every expert alike.
    const auto term = [mx](double x) { return std::isinf(mx) ? (x == mx ? 1.0 : 0.0) : std::exp(x - mx); };
    double sum = 0.0;
    for (int e = 0; e < experts; ++e) sum += term(v[e]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[a] > v[b]; });  // ties keep id order
    double picked = 0.0;
    for (int j = 0; j < top_k; ++j) picked += term(v[order[j]]) / sum;
    for (int j = 0; j < top_k; ++j) {
      const double p = term(v[order[j]]) / sum;
      r.ids[static_cast<size_t>(t) * top_k + j] = order[j];
      r.weights[static_cast<size_t>(t) * top_k + j] = renormalize ? p / picked : p;
    }
    r.margin[t] = top_k < experts ? v[order[top_k - 1]] - v[order[top_k]] : INFINITY;
  }
  return r;
}

int64_t first_routing_mismatch(const Routing& r, const int32_t* ids, const float* weights, int m, int top_k,
                               double weight_tol, double tie) {
  for (int t = 0; t < m; ++t) {
    if (r.margin[t] < tie) continue;
    for (int j = 0; j < top_k; ++j) {
      const size_t i = static_cast<size_t>(t) * top_k + j;
      if (ids[i] != r.ids[i] || !(std::fabs(weights[i] - r.weights[i]) <= weight_tol)) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

std::vector<double> moe_full(const MoeProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.m) * p.n, 0.0);
  const int kb = p.k / 128, nb = (p.n + 127) / 128;
  parallel_rows(p.m, [&](int64_t t) {
    const float* x = p.xq + t * p.k;
    const float* xs = p.x_scales + t * kb;
    for (int j = 0; j < p.top_k; ++j) {
      const int e = p.ids[t * p.top_k + j];
      if (e < 0 || e >= p.experts) continue;
      const double wt = p.weights[t * p.top_k + j];
      for (int c = 0; c < p.n; ++c) {
        const float* w = p.w + (static_cast<int64_t>(e) * p.n + c) * p.k;
        const float* ws = p.w_scales + (static_cast<int64_t>(e) * nb + c / 128) * kb;
        double acc = 0.0;
        for (int b = 0; b < kb; ++b) {
          double s = 0.0;
          for (int i = b * 128; i < (b + 1) * 128; ++i) s += static_cast<double>(x[i]) * static_cast<double>(w[i]);
          acc += s * xs[b] * ws[b];
        }
        out[static_cast<size_t>(t) * p.n + c] += wt * acc;
      }
    }
  });
  return out;
}

}  // namespace lowbit::reference
