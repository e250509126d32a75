// lowbit's PyTorch operators (torch.ops.lowbit.*): each runs lowbit on the caller's tensors, on
// PyTorch's current stream of their device, with outputs and workspaces from PyTorch's caching
// allocator (so the calls capture into CUDA graphs). Every operator has a Meta implementation,
// so torch.compile and fake tensors see its output shapes. lowbit's Status becomes an exception:
// a bad argument a ValueError (TypeError for a wrong dtype or device), anything else a RuntimeError,
// each with lowbit's message.
//
// Only c10 core and ATen APIs are used (the CUDA stream comes through c10::Stream), so the file
// compiles against any PyTorch build; the CUDA kernels run where PyTorch has a CUDA device.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "lowbit/lowbit.h"

namespace {

using at::Tensor;
using lowbit::Status;
using lowbit::StatusCode;

// ---- checks and conversions -------------------------------------------------------------------

void raise_if_error(const Status& st) {
  if (st.ok()) return;
  if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kWorkspaceTooSmall)
    TORCH_CHECK_VALUE(false, st.message());
  TORCH_CHECK(false, st.to_string());
}

void expect(const Tensor& t, const char* name, at::ScalarType dtype, int64_t dim) {
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, "lowbit: ", name, " must be ", c10::toString(dtype), ", got ",
                   c10::toString(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == dim, "lowbit: ", name, " must have ", dim, " dimensions, got ", t.dim());
  TORCH_CHECK_VALUE(t.is_contiguous(), "lowbit: ", name, " must be contiguous (row-major)");
}

void expect_cuda(const Tensor& t, const char* name, const Tensor& like) {
  if (t.is_meta()) return;
  TORCH_CHECK_TYPE(t.is_cuda(), "lowbit: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK_VALUE(t.device() == like.device(), "lowbit: ", name, " is on ", t.device(), ", the call on ",
                    like.device());
}

void expect_scalar(const std::optional<Tensor>& t, const char* name, const Tensor& like) {
  if (!t) return;
  TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, "lowbit: ", name, " must be float32");
  TORCH_CHECK_VALUE(t->numel() == 1, "lowbit: ", name, " must hold one value (a per-tensor scale)");
  expect_cuda(*t, name, like);
}

lowbit::OutType out_type(std::optional<at::ScalarType> dtype, at::ScalarType fallback = at::kBFloat16) {
  const at::ScalarType d = dtype.value_or(fallback);
  TORCH_CHECK_TYPE(d == at::kBFloat16 || d == at::kFloat, "lowbit: out_dtype must be bfloat16 or float32, got ",
                   c10::toString(d));
  return d == at::kFloat ? lowbit::OutType::kFP32 : lowbit::OutType::kBF16;
}

// fp8_gemm also writes FP16; the other operators keep to BF16 and FP32 (out_type).
lowbit::OutType fp8_out_type(at::ScalarType d, const char* name) {
  TORCH_CHECK_TYPE(d == at::kBFloat16 || d == at::kHalf || d == at::kFloat, "lowbit: ", name,
                   " must be bfloat16, float16 or float32, got ", c10::toString(d));
  return d == at::kFloat ? lowbit::OutType::kFP32 : d == at::kHalf ? lowbit::OutType::kFP16 : lowbit::OutType::kBF16;
}

at::ScalarType scalar_type(lowbit::OutType t) {
  return t == lowbit::OutType::kFP32 ? at::kFloat : t == lowbit::OutType::kFP16 ? at::kHalf : at::kBFloat16;
}

cudaStream_t current_stream(const Tensor& t) {
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return static_cast<cudaStream_t>(impl.getStream(t.device()).native_handle());
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

// The split-K workspace of the dense GEMMs (fp8, 2:4): one per (device, stream), zero-filled once
// on that stream and left zeroed by every call (lowbit/gemm.h). Calls on one stream are ordered,
// so they share it safely. A stream that is capturing a graph when it has none yet gets none:
// the call then runs without split-K (a buffer made inside the capture would belong to the graph).
constexpr int64_t kSplitWorkspaceBytes = int64_t{32} << 20;
std::pair<void*, size_t> split_workspace(const Tensor& like, cudaStream_t stream) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, Tensor> cache;
  const std::pair<int, cudaStream_t> key{like.device().index(), stream};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (capturing(stream)) return {nullptr, 0};
    it = cache.emplace(key, at::zeros({kSplitWorkspaceBytes}, like.options().dtype(at::kByte))).first;
  }
  return {it->second.data_ptr(), static_cast<size_t>(kSplitWorkspaceBytes)};
}

Tensor scratch(const Tensor& like, size_t bytes) {
  return at::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, like.options().dtype(at::kByte));
}

lowbit::Activation activation(const std::string& a) {
  if (a == "none") return lowbit::Activation::kNone;
  if (a == "gelu") return lowbit::Activation::kGelu;
  if (a == "silu") return lowbit::Activation::kSilu;
  TORCH_CHECK_VALUE(false, "lowbit: activation must be 'none', 'gelu' or 'silu', got '", a, "'");
}

// ---- fp8_gemm ------------------------------------------------------------------------------------

// One of fp8_gemm's dequantization scales: a single value (per tensor), or one per row of its
// operand, shaped as torch._scaled_mm's rowwise scales come (a_scale [M, 1], b_scale [1, N]) or as
// plain vectors. One value is per tensor even where M or N is 1: the same product either way.
// Returns whether the scale is per row.
bool fp8_row_scale(const std::optional<Tensor>& t, const char* name, int64_t rows, bool b_side, const Tensor& like) {
  if (!t) return false;
  TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, "lowbit: ", name, " must be float32");
  expect_cuda(*t, name, like);
  if (t->numel() == 1) return false;
  const bool column = t->dim() == 2 && t->size(0) == rows && t->size(1) == 1;
  const bool row = b_side && t->dim() == 2 && t->size(0) == 1 && t->size(1) == rows;
  TORCH_CHECK_VALUE((t->dim() == 1 && t->size(0) == rows) || column || row, "lowbit: ", name,
                    " must hold one value (per tensor) or ", b_side ? "N = " : "M = ", rows,
                    b_side ? " (per channel: [N], [1, N] or [N, 1])" : " (per token: [M] or [M, 1])", ", got shape ",
                    t->sizes());
  TORCH_CHECK_VALUE(t->is_contiguous(), "lowbit: ", name, " must be contiguous");
  return true;
}

// Returns whether a_scale and b_scale are per row (fp8_row_scale).
std::pair<bool, bool> fp8_gemm_checks(const Tensor& a, const Tensor& b, const std::optional<Tensor>& a_scale,
                                      const std::optional<Tensor>& b_scale, const std::optional<Tensor>& bias,
                                      const std::optional<Tensor>& residual) {
  expect(a, "a", at::kFloat8_e4m3fn, 2);
  expect(b, "b", at::kFloat8_e4m3fn, 2);
  TORCH_CHECK_VALUE(a.size(1) == b.size(1), "lowbit: a is [M, K] and b [N, K]; got K = ", a.size(1), " and ",
                    b.size(1));
  expect_cuda(a, "a", a);
  expect_cuda(b, "b", a);
  const bool a_rows = fp8_row_scale(a_scale, "a_scale", a.size(0), false, a);
  const bool b_rows = fp8_row_scale(b_scale, "b_scale", b.size(0), true, a);
  if (bias) {
    expect(*bias, "bias", at::kBFloat16, 1);
    TORCH_CHECK_VALUE(bias->size(0) == b.size(0), "lowbit: bias must have N = ", b.size(0), " entries");
    expect_cuda(*bias, "bias", a);
  }
  if (residual) {
    expect(*residual, "residual", at::kBFloat16, 2);
    TORCH_CHECK_VALUE(residual->size(0) == a.size(0) && residual->size(1) == b.size(0),
                      "lowbit: residual must be [M, N]");
    expect_cuda(*residual, "residual", a);
  }
  return {a_rows, b_rows};
}

Tensor& fp8_gemm_out(const Tensor& a, const Tensor& b, double alpha, const std::optional<Tensor>& a_scale,
                     const std::optional<Tensor>& b_scale, const std::optional<Tensor>& bias,
                     const std::optional<Tensor>& residual, const std::string& act, Tensor& out) {
  const auto [a_rows, b_rows] = fp8_gemm_checks(a, b, a_scale, b_scale, bias, residual);
  const lowbit::OutType ot = fp8_out_type(out.scalar_type(), "out");
  expect(out, "out", out.scalar_type(), 2);
  TORCH_CHECK_VALUE(out.size(0) == a.size(0) && out.size(1) == b.size(0), "lowbit: out must be [M, N] = [",
                    a.size(0), ", ", b.size(0), "]");
  expect_cuda(out, "out", a);
  const c10::DeviceGuard guard(a.device());
  const cudaStream_t stream = current_stream(a);
  lowbit::Fp8GemmArgs g;
  g.m = a.size(0);
  g.n = b.size(0);
  g.k = a.size(1);
  g.a = a.data_ptr();
  g.b = b.data_ptr();
  g.d = out.data_ptr();
  g.out_type = ot;
  g.alpha = static_cast<float>(alpha);
  g.a_scale = a_scale && !a_rows ? a_scale->data_ptr<float>() : nullptr;
  g.b_scale = b_scale && !b_rows ? b_scale->data_ptr<float>() : nullptr;
  g.a_row_scale = a_rows ? a_scale->data_ptr<float>() : nullptr;
  g.b_row_scale = b_rows ? b_scale->data_ptr<float>() : nullptr;
  g.bias = bias ? bias->data_ptr() : nullptr;
  g.residual = residual ? residual->data_ptr() : nullptr;
  g.activation = activation(act);
  const auto ws = split_workspace(a, stream);
  g.workspace = ws.first;
  g.workspace_bytes = ws.second;
  raise_if_error(lowbit::fp8_gemm(g, stream));
  return out;
}

Tensor fp8_gemm(const Tensor& a, const Tensor& b, std::optional<at::ScalarType> out_dtype, double alpha,
                const std::optional<Tensor>& a_scale, const std::optional<Tensor>& b_scale,
                const std::optional<Tensor>& bias, const std::optional<Tensor>& residual, const std::string& act) {
  fp8_gemm_checks(a, b, a_scale, b_scale, bias, residual);
  const lowbit::OutType ot = fp8_out_type(out_dtype.value_or(at::kBFloat16), "out_dtype");
  Tensor out = at::empty({a.size(0), b.size(0)}, a.options().dtype(scalar_type(ot)));
  return fp8_gemm_out(a, b, alpha, a_scale, b_scale, bias, residual, act, out);
}

Tensor fp8_gemm_meta(const Tensor& a, const Tensor& b, std::optional<at::ScalarType> out_dtype, double,
                     const std::optional<Tensor>& a_scale, const std::optional<Tensor>& b_scale,
                     const std::optional<Tensor>& bias, const std::optional<Tensor>& residual, const std::string& act) {
  fp8_gemm_checks(a, b, a_scale, b_scale, bias, residual);
  activation(act);
  const lowbit::OutType ot = fp8_out_type(out_dtype.value_or(at::kBFloat16), "out_dtype");
  return at::empty({a.size(0), b.size(0)}, a.options().dtype(scalar_type(ot)));
}

Tensor& fp8_gemm_out_meta(const Tensor& a, const Tensor& b, double, const std::optional<Tensor>& a_scale,
                          const std::optional<Tensor>& b_scale, const std::optional<Tensor>& bias,
                          const std::optional<Tensor>& residual, const std::string& act, Tensor& out) {
  fp8_gemm_checks(a, b, a_scale, b_scale, bias, residual);
  activation(act);
  fp8_out_type(out.scalar_type(), "out");
  TORCH_CHECK_VALUE(out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b.size(0),
                    "lowbit: out must be [M, N] = [", a.size(0), ", ", b.size(0), "]");
  return out;
}

// ---- block-scaled FP8 ----------------------------------------------------------------------------

void blockscaled_checks(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb) {
  expect(a, "a", at::kFloat8_e4m3fn, 2);
  expect(b, "b", at::kFloat8_e4m3fn, 2);
  TORCH_CHECK_VALUE(a.size(1) == b.size(1), "lowbit: a is [M, K] and b [N, K]; got K = ", a.size(1), " and ",
                    b.size(1));
  const int64_t kb = (a.size(1) + 127) / 128, nb = (b.size(0) + 127) / 128;
  expect(sfa, "sfa", at::kFloat, 2);
  TORCH_CHECK_VALUE(sfa.size(0) == kb && sfa.size(1) >= a.size(0),
                    "lowbit: sfa must be [ceil(K / 128), ld] with ld >= M (K-block-major; quantize_fp8_1x128 "
                    "makes it), got [", sfa.size(0), ", ", sfa.size(1), "]");
  expect(sfb, "sfb", at::kFloat, 2);
  TORCH_CHECK_VALUE(sfb.size(0) == nb && sfb.size(1) == kb, "lowbit: sfb must be [ceil(N / 128), ceil(K / 128)]");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{b, "b"}, {sfa, "sfa"}, {sfb, "sfb"}})
    expect_cuda(t, name, a);
  expect_cuda(a, "a", a);
}

Tensor fp8_blockscaled_gemm(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                            std::optional<at::ScalarType> out_dtype) {
  blockscaled_checks(a, b, sfa, sfb);
  const lowbit::OutType ot = out_type(out_dtype);
  Tensor out = at::empty({a.size(0), b.size(0)}, a.options().dtype(scalar_type(ot)));
  const c10::DeviceGuard guard(a.device());
  lowbit::Fp8BlockScaledArgs x;
  x.m = a.size(0);
  x.n = b.size(0);
  x.k = a.size(1);
  x.a = a.data_ptr();
  x.b = b.data_ptr();
  x.d = out.data_ptr();
  x.sfa = sfa.data_ptr<float>();
  x.sfa_ld = sfa.size(1);
  x.sfb = sfb.data_ptr<float>();
  x.out_type = ot;
  raise_if_error(lowbit::fp8_blockscaled_gemm(x, current_stream(a)));
  return out;
}

Tensor fp8_blockscaled_gemm_meta(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                                 std::optional<at::ScalarType> out_dtype) {
  blockscaled_checks(a, b, sfa, sfb);
  return at::empty({a.size(0), b.size(0)}, a.options().dtype(scalar_type(out_type(out_dtype))));
}

// ---- NVFP4 ---------------------------------------------------------------------------------------

void prepack_checks(const Tensor& packed, const Tensor& scales, int64_t k, bool swizzled) {
  expect(packed, "packed", at::kByte, 2);
  TORCH_CHECK_VALUE(k > 0 && k % 32 == 0 && packed.size(1) * 2 == k,
                    "lowbit: packed must be [N, K / 2] bytes with K a positive multiple of 32");
  TORCH_CHECK_TYPE(scales.scalar_type() == at::kByte || scales.scalar_type() == at::kFloat8_e4m3fn,
                   "lowbit: scales must be uint8 or float8_e4m3fn (E4M3 bytes)");
  TORCH_CHECK_VALUE(scales.is_contiguous(), "lowbit: scales must be contiguous");
  const int64_t n = packed.size(0);
  const int64_t need = swizzled ? (n + 127) / 128 * 128 * ((k / 16 + 3) / 4 * 4) : n * (k / 16);
  TORCH_CHECK_VALUE(scales.numel() == need, "lowbit: scales must hold ", need, " bytes (",
                    swizzled ? "the 128x4 swizzled layout" : "[N, K / 16]", "), got ", scales.numel());
  expect_cuda(packed, "packed", packed);
  expect_cuda(scales, "scales", packed);
}

Tensor nvfp4_prepack_weights(const Tensor& packed, const Tensor& scales, int64_t k, bool swizzled) {
  prepack_checks(packed, scales, k, swizzled);
  const int64_t n = packed.size(0);
  const size_t bytes = lowbit::nvfp4_prepacked_bytes(n, k);
  Tensor out = at::empty({static_cast<int64_t>(bytes)}, packed.options().dtype(at::kByte));
  const c10::DeviceGuard guard(packed.device());
  lowbit::Nvfp4PrepackArgs p;
  p.n = n;
  p.k = k;
  p.packed = packed.data_ptr();
  p.scales = scales.data_ptr();
  p.scales_swizzled = swizzled;
  p.out = out.data_ptr();
  p.out_bytes = bytes;
  raise_if_error(lowbit::nvfp4_prepack_weights(p, current_stream(packed)));
  return out;
}

Tensor nvfp4_prepack_weights_meta(const Tensor& packed, const Tensor& scales, int64_t k, bool swizzled) {
  prepack_checks(packed, scales, k, swizzled);
  return at::empty({static_cast<int64_t>(lowbit::nvfp4_prepacked_bytes(packed.size(0), k))},
                   packed.options().dtype(at::kByte));
}

// a: BF16 [M, K], or NVFP4 [M, K / 2] bytes with a_scales [M, K / 16].
int64_t nvfp4_checks(const Tensor& a, const std::optional<Tensor>& a_scales, const Tensor& b_prepacked, int64_t n) {
  const bool fp4 = a.scalar_type() == at::kByte;
  TORCH_CHECK_TYPE(fp4 || a.scalar_type() == at::kBFloat16,
                   "lowbit: a must be bfloat16 [M, K] or uint8 [M, K / 2] (NVFP4, with a_scales)");
  TORCH_CHECK_VALUE(a.dim() == 2 && a.is_contiguous(), "lowbit: a must be a contiguous matrix");
  TORCH_CHECK_VALUE(fp4 == a_scales.has_value(), "lowbit: a_scales go with NVFP4 (uint8) activations only");
  const int64_t k = fp4 ? a.size(1) * 2 : a.size(1);
  if (fp4) {
    TORCH_CHECK_TYPE(a_scales->scalar_type() == at::kByte || a_scales->scalar_type() == at::kFloat8_e4m3fn,
                     "lowbit: a_scales must be uint8 or float8_e4m3fn");
    TORCH_CHECK_VALUE(a_scales->is_contiguous() && a_scales->numel() == a.size(0) * (k / 16),
                      "lowbit: a_scales must be [M, K / 16]");
    expect_cuda(*a_scales, "a_scales", a);
  }
  expect(b_prepacked, "b_prepacked", at::kByte, 1);
  TORCH_CHECK_VALUE(n > 0 && static_cast<size_t>(b_prepacked.numel()) == lowbit::nvfp4_prepacked_bytes(n, k),
                    "lowbit: b_prepacked must be nvfp4_prepack_weights' output for [n, K] = [", n, ", ", k, "]");
  expect_cuda(a, "a", a);
  expect_cuda(b_prepacked, "b_prepacked", a);
  return k;
}

Tensor nvfp4_gemm(const Tensor& a, const std::optional<Tensor>& a_scales, const Tensor& b_prepacked, int64_t n,
                  double a_global_scale, double b_global_scale) {
  const int64_t k = nvfp4_checks(a, a_scales, b_prepacked, n);
  const bool fp4 = a_scales.has_value();
  Tensor out = at::empty({a.size(0), n}, a.options().dtype(at::kBFloat16));
  const c10::DeviceGuard guard(a.device());
  lowbit::Nvfp4GemmArgs g;
  g.m = a.size(0);
  g.n = n;
  g.k = k;
  (fp4 ? g.a_packed : g.a_bf16) = a.data_ptr();
  if (fp4) g.a_scales = a_scales->data_ptr();
  g.a_global_scale = static_cast<float>(a_global_scale);
  g.b_prepacked = b_prepacked.data_ptr();
  g.b_global_scale = static_cast<float>(b_global_scale);
  g.d = out.data_ptr();
  // Room for the staged activations only: the chooser then runs K unsplit (split-K partials need
  // a zero-filled counter region this per-call buffer does not have).
  lowbit::Nvfp4GemmConfig unsplit;
  unsplit.splits = 1;
  const size_t bytes = lowbit::nvfp4_gemm_workspace_size(g.m, n, k, fp4, unsplit);
  Tensor ws = scratch(a, bytes);
  g.workspace = bytes > 0 ? ws.data_ptr() : nullptr;
  g.workspace_bytes = bytes;
  raise_if_error(lowbit::nvfp4_gemm(g, current_stream(a)));
  return out;
}

Tensor nvfp4_gemm_meta(const Tensor& a, const std::optional<Tensor>& a_scales, const Tensor& b_prepacked, int64_t n,
                       double, double) {
  nvfp4_checks(a, a_scales, b_prepacked, n);
  return at::empty({a.size(0), n}, a.options().dtype(at::kBFloat16));
}

// ---- 2:4 sparse ----------------------------------------------------------------------------------

lowbit::SparseType sparse_type(const Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kHalf, "lowbit: ", name,
                   " must be float8_e4m3fn or float16");
  return t.scalar_type() == at::kHalf ? lowbit::SparseType::kF16 : lowbit::SparseType::kE4M3;
}

std::tuple<Tensor, Tensor> sparse24_compress(const Tensor& dense, bool prune) {
  const lowbit::SparseType type = sparse_type(dense, "dense");
  expect(dense, "dense", dense.scalar_type(), 2);
  expect_cuda(dense, "dense", dense);
  const int64_t m = dense.size(0), k = dense.size(1);
  Tensor values = at::empty({m, k / 2}, dense.options());
  Tensor meta = at::empty({static_cast<int64_t>(lowbit::sparse24_meta_bytes(m, k, type))}, dense.options().dtype(at::kByte));
  const c10::DeviceGuard guard(dense.device());
  const cudaStream_t stream = current_stream(dense);
  if (prune) {
    raise_if_error(lowbit::sparse24_compress(dense.data_ptr(), m, k, type, true, values.data_ptr(), meta.data_ptr(),
                                             nullptr, stream));
  } else {
    // Checked: waits for the result and names the first group with more than two nonzeros.
    Tensor violation = at::empty({1}, dense.options().dtype(at::kLong));
    raise_if_error(lowbit::sparse24_compress_checked(dense.data_ptr(), m, k, type, values.data_ptr(),
                                                     meta.data_ptr(), violation.data_ptr<int64_t>(), stream));
  }
  return {values, meta};
}

std::tuple<Tensor, Tensor> sparse24_compress_meta(const Tensor& dense, bool) {
  const lowbit::SparseType type = sparse_type(dense, "dense");
  expect(dense, "dense", dense.scalar_type(), 2);
  const int64_t m = dense.size(0), k = dense.size(1);
  return {at::empty({m, k / 2}, dense.options()),
          at::empty({static_cast<int64_t>(lowbit::sparse24_meta_bytes(m, k, type))}, dense.options().dtype(at::kByte))};
}

void sparse_checks(const Tensor& a_values, const Tensor& a_meta, const Tensor& b) {
  const lowbit::SparseType type = sparse_type(a_values, "a_values");
  expect(a_values, "a_values", a_values.scalar_type(), 2);
  expect(b, "b", a_values.scalar_type(), 2);
  TORCH_CHECK_VALUE(b.size(1) == 2 * a_values.size(1), "lowbit: a_values is [M, K / 2] and b [N, K]");
  expect(a_meta, "a_meta", at::kByte, 1);
  TORCH_CHECK_VALUE(
      static_cast<size_t>(a_meta.numel()) == lowbit::sparse24_meta_bytes(a_values.size(0), b.size(1), type),
      "lowbit: a_meta must be sparse24_compress' metadata for this A");
  expect_cuda(a_values, "a_values", a_values);
  expect_cuda(a_meta, "a_meta", a_values);
  expect_cuda(b, "b", a_values);
}

Tensor sparse24_gemm(const Tensor& a_values, const Tensor& a_meta, const Tensor& b, double alpha,
                     const std::optional<Tensor>& a_scale, const std::optional<Tensor>& b_scale, bool fast_accum) {
  sparse_checks(a_values, a_meta, b);
  expect_scalar(a_scale, "a_scale", a_values);
  expect_scalar(b_scale, "b_scale", a_values);
  const lowbit::SparseType type = sparse_type(a_values, "a_values");
  const bool f16 = type == lowbit::SparseType::kF16;
  Tensor out = at::empty({a_values.size(0), b.size(0)}, a_values.options().dtype(f16 ? at::kHalf : at::kBFloat16));
  const c10::DeviceGuard guard(a_values.device());
  const cudaStream_t stream = current_stream(a_values);
  lowbit::Sparse24GemmArgs g;
  g.m = a_values.size(0);
  g.n = b.size(0);
  g.k = b.size(1);
  g.type = type;
  g.a_values = a_values.data_ptr();
  g.a_meta = a_meta.data_ptr();
  g.b = b.data_ptr();
  g.d = out.data_ptr();
  g.out = f16 ? lowbit::SparseOut::kFP16 : lowbit::SparseOut::kBF16;
  g.alpha = static_cast<float>(alpha);
  g.a_scale = a_scale ? a_scale->data_ptr<float>() : nullptr;
  g.b_scale = b_scale ? b_scale->data_ptr<float>() : nullptr;
  g.fast_accum = fast_accum;
  const auto ws = split_workspace(a_values, stream);
  g.workspace = ws.first;
  g.workspace_bytes = ws.second;
  raise_if_error(lowbit::sparse24_gemm(g, stream));
  return out;
}

Tensor sparse24_gemm_meta(const Tensor& a_values, const Tensor& a_meta, const Tensor& b, double,
                          const std::optional<Tensor>&, const std::optional<Tensor>&, bool) {
  sparse_checks(a_values, a_meta, b);
  const bool f16 = a_values.scalar_type() == at::kHalf;
  return at::empty({a_values.size(0), b.size(0)}, a_values.options().dtype(f16 ? at::kHalf : at::kBFloat16));
}

// ---- ViT patch embedding ---------------------------------------------------------------------------

void patch_checks(const Tensor& patches, const Tensor& weight, const Tensor& bias, const Tensor& pos) {
  expect(patches, "patches", at::kFloat8_e4m3fn, 2);
  expect(weight, "weight", at::kFloat8_e4m3fn, 2);
  TORCH_CHECK_VALUE(patches.size(1) == weight.size(1), "lowbit: patches is [M, K] and weight [N, K]");
  expect(bias, "bias", at::kBFloat16, 1);
  expect(pos, "pos", at::kBFloat16, 2);
  TORCH_CHECK_VALUE(bias.size(0) == weight.size(0) && pos.size(1) == weight.size(0),
                    "lowbit: bias is [N] and pos [P, N]");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{weight, "weight"}, {bias, "bias"}, {pos, "pos"}})
    expect_cuda(t, name, patches);
  expect_cuda(patches, "patches", patches);
}

Tensor patch_embed_fp8(const Tensor& patches, const Tensor& weight, const Tensor& bias, const Tensor& pos, double alpha,
                       const std::optional<Tensor>& patches_scale, const std::optional<Tensor>& weight_scale) {
  patch_checks(patches, weight, bias, pos);
  expect_scalar(patches_scale, "patches_scale", patches);
  expect_scalar(weight_scale, "weight_scale", patches);
  Tensor out = at::empty({patches.size(0), weight.size(0)}, patches.options().dtype(at::kBFloat16));
  const c10::DeviceGuard guard(patches.device());
  const cudaStream_t stream = current_stream(patches);
  lowbit::PatchEmbedArgs p;
  p.m = patches.size(0);
  p.n = weight.size(0);
  p.k = patches.size(1);
  p.patches = patches.data_ptr();
  p.weight = weight.data_ptr();
  p.bias = bias.data_ptr();
  p.bias_len = bias.size(0);
  p.pos = pos.data_ptr();
  p.pos_rows = pos.size(0);
  p.pos_cols = pos.size(1);
  p.out = out.data_ptr();
  p.alpha = static_cast<float>(alpha);
  p.patches_scale = patches_scale ? patches_scale->data_ptr<float>() : nullptr;
  p.weight_scale = weight_scale ? weight_scale->data_ptr<float>() : nullptr;
  const auto ws = split_workspace(patches, stream);
  p.workspace = ws.first;
  p.workspace_bytes = ws.second;
  raise_if_error(lowbit::patch_embed_fp8(p, stream));
  return out;
}

Tensor patch_embed_fp8_meta(const Tensor& patches, const Tensor& weight, const Tensor& bias, const Tensor& pos, double,
                            const std::optional<Tensor>&, const std::optional<Tensor>&) {
  patch_checks(patches, weight, bias, pos);
  return at::empty({patches.size(0), weight.size(0)}, patches.options().dtype(at::kBFloat16));
}

// ---- fused MoE -----------------------------------------------------------------------------------

lowbit::MoeShape moe_checks(const Tensor& x, const Tensor& w, const Tensor& w_scales, const std::optional<Tensor>& logits,
                            const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                            int64_t top_k) {
  expect(x, "x", at::kBFloat16, 2);
  expect(w, "w", at::kFloat8_e4m3fn, 3);
  TORCH_CHECK_VALUE(w.size(2) == x.size(1), "lowbit: w is [experts, N, K] and x [M, K]");
  expect(w_scales, "w_scales", at::kFloat, 3);
  TORCH_CHECK_VALUE(w_scales.size(0) == w.size(0) && w_scales.size(1) == (w.size(1) + 127) / 128 &&
                        w_scales.size(2) == (w.size(2) + 127) / 128,
                    "lowbit: w_scales must be [experts, ceil(N / 128), K / 128]");
  TORCH_CHECK_VALUE(topk_ids.has_value() == topk_weights.has_value(),
                    "lowbit: pass both topk_ids and topk_weights, or neither");
  TORCH_CHECK_VALUE(logits.has_value() || topk_ids.has_value(), "lowbit: pass logits or a routing (topk_ids, topk_weights)");
  if (logits) {
    TORCH_CHECK_TYPE(logits->scalar_type() == at::kFloat || logits->scalar_type() == at::kBFloat16,
                     "lowbit: logits must be float32 or bfloat16");
    TORCH_CHECK_VALUE(logits->dim() == 2 && logits->is_contiguous() && logits->size(0) == x.size(0) &&
                          logits->size(1) == w.size(0),
                      "lowbit: logits must be a contiguous [M, experts]");
    expect_cuda(*logits, "logits", x);
  }
  if (topk_ids) {
    expect(*topk_ids, "topk_ids", at::kInt, 2);
    expect(*topk_weights, "topk_weights", at::kFloat, 2);
    TORCH_CHECK_VALUE(topk_ids->size(0) == x.size(0) && topk_ids->size(1) == top_k &&
                          topk_weights->sizes() == topk_ids->sizes(),
                      "lowbit: topk_ids and topk_weights must be [M, top_k]");
    expect_cuda(*topk_ids, "topk_ids", x);
    expect_cuda(*topk_weights, "topk_weights", x);
  }
  expect_cuda(x, "x", x);
  expect_cuda(w, "w", x);
  expect_cuda(w_scales, "w_scales", x);
  TORCH_CHECK_VALUE(x.size(0) <= INT32_MAX && w.size(0) <= INT32_MAX && w.size(1) <= INT32_MAX &&
                        w.size(2) <= INT32_MAX && top_k >= 0 && top_k <= INT32_MAX,
                    "lowbit: sizes out of range");
  return lowbit::MoeShape{static_cast<int>(x.size(0)), static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                          static_cast<int>(w.size(0)), static_cast<int>(top_k)};
}

Tensor fused_moe_fp8(const Tensor& x, const Tensor& w, const Tensor& w_scales, const std::optional<Tensor>& logits,
                     const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights, int64_t top_k,
                     double softcap, bool renormalize, bool deterministic, std::optional<at::ScalarType> out_dtype) {
  const lowbit::MoeShape shape = moe_checks(x, w, w_scales, logits, topk_ids, topk_weights, top_k);
  const lowbit::OutType ot = out_type(out_dtype);
  Tensor y = at::empty({x.size(0), w.size(1)}, x.options().dtype(scalar_type(ot)));
  const c10::DeviceGuard guard(x.device());
  lowbit::FusedMoeArgs a;
  a.shape = shape;
  a.logits = logits ? logits->data_ptr() : nullptr;
  a.logits_type = logits && logits->scalar_type() == at::kBFloat16 ? lowbit::OutType::kBF16 : lowbit::OutType::kFP32;
  a.softcap = static_cast<float>(softcap);
  a.renormalize = renormalize;
  a.topk_ids = topk_ids ? topk_ids->data_ptr<int32_t>() : nullptr;
  a.topk_weights = topk_weights ? topk_weights->data_ptr<float>() : nullptr;
  a.x = x.data_ptr();
  a.w = w.data_ptr();
  a.w_scales = w_scales.data_ptr<float>();
  a.y = y.data_ptr();
  a.y_type = ot;
  a.reduce = deterministic ? lowbit::MoeReduce::kDeterministic : lowbit::MoeReduce::kAtomic;
  // No initialization needed (lowbit/moe.h): a fresh buffer from the caching allocator.
  const size_t bytes = lowbit::fused_moe_workspace_size(shape, a.reduce, ot);
  // A refused shape sizes nothing: the call then says why.
  if (bytes == 0) raise_if_error(lowbit::fused_moe_fp8(a, nullptr, 0, current_stream(x)));
  Tensor ws = scratch(x, bytes + 256);
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data_ptr()) + 255) / 256 * 256);
  raise_if_error(lowbit::fused_moe_fp8(a, base, bytes, current_stream(x)));
  return y;
}

Tensor fused_moe_fp8_meta(const Tensor& x, const Tensor& w, const Tensor& w_scales, const std::optional<Tensor>& logits,
                          const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                          int64_t top_k, double, bool, bool, std::optional<at::ScalarType> out_dtype) {
  moe_checks(x, w, w_scales, logits, topk_ids, topk_weights, top_k);
  return at::empty({x.size(0), w.size(1)}, x.options().dtype(scalar_type(out_type(out_dtype))));
}

std::string version() { return lowbit::version(); }

// ---- per-token activation quantization -------------------------------------------------------------

// x [M, K] BF16 -> (E4M3 [M, K], float32 [M]); with `silu_mul`, x is [M, 2 * I] (gate, then up)
// and the codes are [M, I] of SiLU(gate) * up.
void quantize_checks(const Tensor& x, bool silu_mul) {
  const char* name = silu_mul ? "gate_up" : "x";
  expect(x, name, at::kBFloat16, 2);
  if (!x.is_meta()) TORCH_CHECK_TYPE(x.is_cuda(), "lowbit: ", name, " must be a CUDA tensor, got ", x.device());
  if (silu_mul)
    TORCH_CHECK_VALUE(x.size(1) % 2 == 0, "lowbit: gate_up must be [M, 2 * I] (gate, then up); got ", x.size(1),
                      " columns");
}

std::tuple<Tensor, Tensor> quantize_outputs(const Tensor& x, bool silu_mul) {
  const int64_t cols = silu_mul ? x.size(1) / 2 : x.size(1);
  return {at::empty({x.size(0), cols}, x.options().dtype(at::kFloat8_e4m3fn)),
          at::empty({x.size(0)}, x.options().dtype(at::kFloat))};
}

std::tuple<Tensor, Tensor> quantize_fp8_per_token(const Tensor& x) {
  quantize_checks(x, false);
  c10::DeviceGuard guard(x.device());
  auto [q, s] = quantize_outputs(x, false);
  if (x.size(0) > 0)
    raise_if_error(lowbit::quantize_fp8_per_token(x.data_ptr(), x.size(0), x.size(1), q.data_ptr(),
                                                  s.data_ptr<float>(), current_stream(x)));
  return {q, s};
}

std::tuple<Tensor, Tensor> silu_mul_quantize_fp8(const Tensor& gate_up) {
  quantize_checks(gate_up, true);
  c10::DeviceGuard guard(gate_up.device());
  auto [q, s] = quantize_outputs(gate_up, true);
  if (gate_up.size(0) > 0)
    raise_if_error(lowbit::silu_mul_quantize_fp8_per_token(gate_up.data_ptr(), gate_up.size(0), gate_up.size(1) / 2,
                                                           q.data_ptr(), s.data_ptr<float>(), current_stream(gate_up)));
  return {q, s};
}

std::tuple<Tensor, Tensor> quantize_fp8_per_token_meta(const Tensor& x) {
  quantize_checks(x, false);
  return quantize_outputs(x, false);
}

std::tuple<Tensor, Tensor> silu_mul_quantize_fp8_meta(const Tensor& gate_up) {
  quantize_checks(gate_up, true);
  return quantize_outputs(gate_up, true);
}


}  // namespace

TORCH_LIBRARY(lowbit, m) {
  m.def("fp8_gemm(Tensor a, Tensor b, *, ScalarType? out_dtype=None, float alpha=1.0, Tensor? a_scale=None, "
        "Tensor? b_scale=None, Tensor? bias=None, Tensor? residual=None, str activation='none') -> Tensor");
  m.def("fp8_gemm.out(Tensor a, Tensor b, *, float alpha=1.0, Tensor? a_scale=None, Tensor? b_scale=None, "
        "Tensor? bias=None, Tensor? residual=None, str activation='none', Tensor(a!) out) -> Tensor(a!)");
  m.def("fp8_blockscaled_gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, *, ScalarType? out_dtype=None) -> Tensor");
  m.def("nvfp4_prepack_weights(Tensor packed, Tensor scales, int k, *, bool swizzled=False) -> Tensor");
  m.def("nvfp4_gemm(Tensor a, Tensor? a_scales, Tensor b_prepacked, int n, *, float a_global_scale=1.0, "
        "float b_global_scale=1.0) -> Tensor");
  m.def("sparse24_compress(Tensor dense, *, bool prune=False) -> (Tensor, Tensor)");
  m.def("sparse24_gemm(Tensor a_values, Tensor a_meta, Tensor b, *, float alpha=1.0, Tensor? a_scale=None, "
        "Tensor? b_scale=None, bool fast_accum=False) -> Tensor");
  m.def("patch_embed_fp8(Tensor patches, Tensor weight, Tensor bias, Tensor pos, *, float alpha=1.0, "
        "Tensor? patches_scale=None, Tensor? weight_scale=None) -> Tensor");
  m.def("fused_moe_fp8(Tensor x, Tensor w, Tensor w_scales, Tensor? logits, Tensor? topk_ids, Tensor? topk_weights, "
        "int top_k, *, float softcap=0.0, bool renormalize=True, bool deterministic=False, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("quantize_fp8_per_token(Tensor x) -> (Tensor, Tensor)");
  m.def("silu_mul_quantize_fp8(Tensor gate_up) -> (Tensor, Tensor)");
  m.def("version() -> str", &version);
}

TORCH_LIBRARY_IMPL(lowbit, CUDA, m) {
  m.impl("quantize_fp8_per_token", &quantize_fp8_per_token);
  m.impl("silu_mul_quantize_fp8", &silu_mul_quantize_fp8);
  m.impl("fp8_gemm", &fp8_gemm);
  m.impl("fp8_gemm.out", &fp8_gemm_out);
  m.impl("fp8_blockscaled_gemm", &fp8_blockscaled_gemm);
  m.impl("nvfp4_prepack_weights", &nvfp4_prepack_weights);
  m.impl("nvfp4_gemm", &nvfp4_gemm);
  m.impl("sparse24_compress", &sparse24_compress);
  m.impl("sparse24_gemm", &sparse24_gemm);
  m.impl("patch_embed_fp8", &patch_embed_fp8);
  m.impl("fused_moe_fp8", &fused_moe_fp8);
}

TORCH_LIBRARY_IMPL(lowbit, Meta, m) {
  m.impl("quantize_fp8_per_token", &quantize_fp8_per_token_meta);
  m.impl("silu_mul_quantize_fp8", &silu_mul_quantize_fp8_meta);
  m.impl("fp8_gemm", &fp8_gemm_meta);
  m.impl("fp8_gemm.out", &fp8_gemm_out_meta);
  m.impl("fp8_blockscaled_gemm", &fp8_blockscaled_gemm_meta);
  m.impl("nvfp4_prepack_weights", &nvfp4_prepack_weights_meta);
  m.impl("nvfp4_gemm", &nvfp4_gemm_meta);
  m.impl("sparse24_compress", &sparse24_compress_meta);
  m.impl("sparse24_gemm", &sparse24_gemm_meta);
  m.impl("patch_embed_fp8", &patch_embed_fp8_meta);
  m.impl("fused_moe_fp8", &fused_moe_fp8_meta);
}
