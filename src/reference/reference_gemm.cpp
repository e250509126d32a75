#include "reference/reference_gemm.h"

#include <algorithm>
#include <cmath>

#include "reference/parallel.h"

namespace lowbit::reference {

double gemm_element(const GemmProblem& p, int64_t row, int64_t col) {
  const float* a = p.a + row * p.k;
  const float* b = p.b + col * p.k;
  double s = 0.0;
  for (int64_t i = 0; i < p.k; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  s *= p.alpha;
  if (p.row_scale) s *= static_cast<double>(p.row_scale[row]);
  if (p.col_scale) s *= static_cast<double>(p.col_scale[col]);
  if (p.bias) s += static_cast<double>(p.bias[col]);
  if (p.row_bcast) s += static_cast<double>(p.row_bcast[(row % p.row_period) * p.n + col]);
  if (p.activation == 1) s = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
  if (p.activation == 2) s = s / (1.0 + std::exp(-s));
  if (p.residual) s += static_cast<double>(p.residual[row * p.n + col]);
  return s;
}


std::vector<double> gemm_full(const GemmProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  parallel_rows(p.m, [&](int64_t r) {
    for (int64_t c = 0; c < p.n; ++c) out[static_cast<size_t>(r * p.n + c)] = gemm_element(p, r, c);
  });
  return out;
}

double blockscaled_element(const BlockScaledProblem& p, int64_t row, int64_t col) {
  const int64_t kblocks = (p.k + 127) / 128;
  const float* a = p.a + row * p.k;
  const float* b = p.b + col * p.k;
  double sum = 0.0;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    double block = 0.0;
    for (int64_t k = kb * 128; k < std::min(p.k, kb * 128 + 128); ++k)
      block += static_cast<double>(a[k]) * static_cast<double>(b[k]);
    sum += block * static_cast<double>(p.sfa[kb * p.sfa_ld + row]) * static_cast<double>(p.sfb[(col / 128) * kblocks + kb]);
  }
  return sum;
}

std::vector<double> blockscaled_full(const BlockScaledProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  parallel_rows(p.m, [&](int64_t r) {
    for (int64_t c = 0; c < p.n; ++c) out[static_cast<size_t>(r * p.n + c)] = blockscaled_element(p, r, c);
  });
  return out;
}

double similarity_diff(const std::vector<double>& ref, const std::vector<double>& got) {
  double xy = 0.0, xx = 0.0, yy = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    xy += ref[i] * got[i];
    xx += ref[i] * ref[i];
    yy += got[i] * got[i];
  }
  const double den = xx + yy;
  if (!std::isfinite(xy) || !std::isfinite(den)) return 1.0;
  return den == 0.0 ? 0.0 : 1.0 - 2.0 * xy / den;
}

ErrorStats compare(const std::vector<double>& ref, const std::vector<double>& got) {
  ErrorStats e;
  double num = 0.0, den = 0.0, ref_max = 0.0, err_max = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) ref_max = std::max(ref_max, std::fabs(ref[i]));
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.nonfinite;
      if (e.worst_index < 0) e.worst_index = static_cast<int64_t>(i);
      continue;
    }
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    if (std::fabs(d) > err_max) {
      err_max = std::fabs(d);
      if (e.nonfinite == 0) e.worst_index = static_cast<int64_t>(i);
    }
  }
  e.rel_fro = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  e.max_rel = ref_max > 0.0 ? err_max / ref_max : err_max;
  return e;
}

}  // namespace lowbit::reference
