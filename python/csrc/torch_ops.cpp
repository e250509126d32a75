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

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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

// The split-K workspace of the dense GEMMs (fp8, block-scaled, 2:4): one per (device, stream), zero-filled once
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
  if (g.m == 0) return out;  // an empty batch: nothing to compute (lowbit's C++ API refuses M = 0)
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
  if (x.m == 0) return out;  // an empty batch: nothing to compute (lowbit's C++ API refuses M = 0)
  const cudaStream_t stream = current_stream(a);
  const auto ws = split_workspace(a, stream);  // split-K where the chooser takes it (small M)
  x.workspace = ws.first;
  x.workspace_bytes = ws.second;
  raise_if_error(lowbit::fp8_blockscaled_gemm(x, stream));
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

// ---- grouped GEMMs -------------------------------------------------------------------------------

// lowbit reads a grouped call's descriptors from device memory (its preparation kernel validates
// them and builds the tensor maps on the device), so the operators build them on the host from the
// caller's tensors and copy them over on the call's stream. Outside capture the staging buffer comes
// from PyTorch's pinned allocator, which keeps it until the copy has run. Under capture the copy is
// a graph node that reads the host buffer at every replay, so that buffer must live as long as the
// graph: it is a buffer of ours held by a CUDA user object the graph owns, whose destructor (which
// may call no CUDA function) hands it back to a free list for later captures.
struct PinnedBuffer {
  void* ptr;
  size_t bytes;
};

struct PinnedFreeList {
  std::mutex mu;
  std::vector<PinnedBuffer*> buffers;
};

// Never destroyed: a graph, and so a user object's destructor, may outlive static destruction.
PinnedFreeList& pinned_free_list() {
  static auto* list = new PinnedFreeList;
  return *list;
}

void release_pinned(void* buffer) {
  PinnedFreeList& list = pinned_free_list();
  std::lock_guard<std::mutex> lock(list.mu);
  list.buffers.push_back(static_cast<PinnedBuffer*>(buffer));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // leave no error pending behind the operator (lowbit/status.h)
  TORCH_CHECK(false, "lowbit: ", what, ": ", cudaGetErrorString(e));
}

PinnedBuffer* take_pinned(size_t bytes) {
  {
    PinnedFreeList& list = pinned_free_list();
    std::lock_guard<std::mutex> lock(list.mu);
    for (auto it = list.buffers.begin(); it != list.buffers.end(); ++it) {
      if ((*it)->bytes < bytes) continue;
      PinnedBuffer* b = *it;
      list.buffers.erase(it);
      return b;
    }
  }
  const size_t size = std::max<size_t>(4096, bytes);
  void* ptr = nullptr;
  // Relaxed for this thread: a capture in PyTorch's default (global) mode refuses calls CUDA deems
  // unsafe while a stream captures; allocating pinned memory does not touch the captured stream.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t e = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
  cudaThreadExchangeStreamCaptureMode(&mode);
  check_cuda(e, "pinned staging buffer for the group descriptors");
  return new PinnedBuffer{ptr, size};
}

// A device copy of `bytes` of host data, made on `stream` (capturing or not).
Tensor upload(const void* data, size_t bytes, const Tensor& like, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(bytes);
  if (!capturing(stream)) {
    Tensor host = at::empty({n}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    std::memcpy(host.data_ptr(), data, bytes);
    return host.to(like.options().dtype(at::kByte), /*non_blocking=*/true);
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph), "cudaStreamGetCaptureInfo");
  PinnedBuffer* buffer = take_pinned(bytes);
  std::memcpy(buffer->ptr, data, bytes);
  cudaUserObject_t object = nullptr;
  cudaError_t e = cudaUserObjectCreate(&object, buffer, release_pinned, 1, cudaUserObjectNoDestructorSync);
  if (e != cudaSuccess) release_pinned(buffer);
  check_cuda(e, "cudaUserObjectCreate");
  e = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (e != cudaSuccess) cudaUserObjectRelease(object, 1);  // its destructor returns the buffer
  check_cuda(e, "cudaGraphRetainUserObject");
  Tensor dev = at::empty({n}, like.options().dtype(at::kByte));
  check_cuda(cudaMemcpyAsync(dev.data_ptr(), buffer->ptr, bytes, cudaMemcpyHostToDevice, stream),
             "copying the group descriptors");
  return dev;
}

// A workspace of `bytes` at an `align`-byte boundary (the tensor owns it).
std::pair<Tensor, void*> aligned_scratch(const Tensor& like, size_t bytes, size_t align) {
  Tensor t = scratch(like, bytes + align);
  const uintptr_t p = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {t, reinterpret_cast<void*>((p + align - 1) / align * align)};
}

// A descriptor's pointer to a tensor. Meta tensors have no memory: an aligned stand-in lets the host
// validation (fp8_grouped_validate, nvfp4_grouped_validate) check their sizes all the same.
void* address(const Tensor& t) { return t.is_meta() ? reinterpret_cast<void*>(uintptr_t{256}) : t.data_ptr(); }

// Runs one group's checks; a failure names the group.
template <class F>
void in_group(size_t g, const F& checks) {
  auto what = [](const c10::Error& e) {
    const std::string& m = e.msg();
    return m.rfind("lowbit: ", 0) == 0 ? m.substr(8) : m;
  };
  try {
    checks();
  } catch (const c10::TypeError& e) {
    TORCH_CHECK_TYPE(false, "lowbit: group ", g, ": ", what(e));
  } catch (const c10::ValueError& e) {
    TORCH_CHECK_VALUE(false, "lowbit: group ", g, ": ", what(e));
  }
}

void same_length(size_t groups, std::initializer_list<std::pair<size_t, const char*>> lists) {
  for (const auto& [n, name] : lists)
    TORCH_CHECK_VALUE(n == groups, "lowbit: one entry per group in every list: ", name, " has ", n, ", a has ",
                      groups);
}

// The host validation names the first bad group before anything launches, under capture too, so a
// call never needs the status block's read-back (a synchronization) to learn of one. `check` reads
// it all the same, outside capture: it also reports a refusal of the whole call on the device.
void check_grouped_status(bool check, Status (*read)(const void*, cudaStream_t), const void* ws, cudaStream_t s) {
  if (check && !capturing(s)) raise_if_error(read(ws, s));
}

int32_t narrow(int64_t v, size_t g) {
  TORCH_CHECK_VALUE(v <= INT32_MAX, "lowbit: group ", g, ": sizes must fit in 32 bits, got ", v);
  return static_cast<int32_t>(v);
}

// Outputs and descriptors of a block-scaled grouped call; validated, launched when `run`.
std::vector<Tensor> fp8_grouped(at::TensorList a, at::TensorList b, at::TensorList sfa, at::TensorList sfb,
                                std::optional<at::ScalarType> out_dtype, bool check, bool run) {
  const size_t groups = a.size();
  same_length(groups, {{b.size(), "b"}, {sfa.size(), "sfa"}, {sfb.size(), "sfb"}});
  const lowbit::OutType ot = out_type(out_dtype);
  std::vector<Tensor> out;
  std::vector<lowbit::Fp8GroupedProblem> desc(groups);
  for (size_t g = 0; g < groups; ++g) {
    in_group(g, [&] {
      blockscaled_checks(a[g], b[g], sfa[g], sfb[g]);
      expect_cuda(a[g], "a", a[0]);
    });
    out.push_back(at::empty({a[g].size(0), b[g].size(0)}, a[g].options().dtype(scalar_type(ot))));
    desc[g] = lowbit::Fp8GroupedProblem{narrow(a[g].size(0), g), narrow(b[g].size(0), g), narrow(a[g].size(1), g), 0,
                                        address(a[g]), address(b[g]), address(out[g]),
                                        static_cast<const float*>(address(sfa[g])),
                                        static_cast<const float*>(address(sfb[g])), sfa[g].size(1)};
  }
  raise_if_error(lowbit::fp8_grouped_validate(desc.data(), static_cast<int>(std::min<size_t>(groups, INT_MAX))));
  if (!run) return out;
  const c10::DeviceGuard guard(a[0].device());
  const cudaStream_t stream = current_stream(a[0]);
  const Tensor problems = upload(desc.data(), groups * sizeof(desc[0]), a[0], stream);
  const size_t bytes = lowbit::fp8_grouped_workspace_size(static_cast<int>(groups));
  const auto [ws, base] = aligned_scratch(a[0], bytes, 128);
  raise_if_error(lowbit::fp8_grouped_gemm(static_cast<const lowbit::Fp8GroupedProblem*>(problems.data_ptr()),
                                          static_cast<int>(groups), ot, base, bytes, stream));
  check_grouped_status(check, lowbit::fp8_grouped_check_status, base, stream);
  return out;
}

std::vector<Tensor> fp8_grouped_gemm(at::TensorList a, at::TensorList b, at::TensorList sfa, at::TensorList sfb,
                                     std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_grouped(a, b, sfa, sfb, out_dtype, check, true);
}

std::vector<Tensor> fp8_grouped_gemm_meta(at::TensorList a, at::TensorList b, at::TensorList sfa, at::TensorList sfb,
                                          std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_grouped(a, b, sfa, sfb, out_dtype, check, false);
}

// The masked layout (DeepGEMM's m_grouped_fp8_gemm_nt_masked): a [G, max_m, K], b [G, N, K],
// sfa [G, ceil(K/128), ld], sfb [G, ceil(N/128), ceil(K/128)], masked_m int32 [G] on the device.
Tensor fp8_masked(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb, const Tensor& masked_m,
                  std::optional<at::ScalarType> out_dtype, bool check, bool run) {
  expect(a, "a", at::kFloat8_e4m3fn, 3);
  expect(b, "b", at::kFloat8_e4m3fn, 3);
  expect(sfa, "sfa", at::kFloat, 3);
  expect(sfb, "sfb", at::kFloat, 3);
  expect(masked_m, "masked_m", at::kInt, 1);
  const int64_t groups = a.size(0), max_m = a.size(1), k = a.size(2), n = b.size(1);
  TORCH_CHECK_VALUE(b.size(0) == groups && b.size(2) == k, "lowbit: a is [G, max_m, K] and b [G, N, K]; got a ",
                    a.sizes(), " and b ", b.sizes());
  const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
  TORCH_CHECK_VALUE(sfa.size(0) == groups && sfa.size(1) == kb && sfa.size(2) >= max_m,
                    "lowbit: sfa must be [G, ceil(K / 128), ld] with ld >= max_m, got ", sfa.sizes());
  TORCH_CHECK_VALUE(sfb.size(0) == groups && sfb.size(1) == nb && sfb.size(2) == kb,
                    "lowbit: sfb must be [G, ceil(N / 128), ceil(K / 128)], got ", sfb.sizes());
  TORCH_CHECK_VALUE(masked_m.size(0) == groups, "lowbit: masked_m must hold one count per group (", groups,
                    "), got ", masked_m.size(0));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{b, "b"}, {sfa, "sfa"}, {sfb, "sfb"},
                                {masked_m, "masked_m"}})
    expect_cuda(t, name, a);
  expect_cuda(a, "a", a);
  TORCH_CHECK_VALUE(groups >= 1 && groups <= INT32_MAX && max_m >= 1 && max_m <= INT32_MAX,
                    "lowbit: groups and max_m must be in [1, 2^31), got ", groups, " and ", max_m);
  const lowbit::OutType ot = out_type(out_dtype);
  Tensor out = at::empty({groups, max_m, n}, a.options().dtype(scalar_type(ot)));
  if (!run) return out;
  const c10::DeviceGuard guard(a.device());
  const cudaStream_t stream = current_stream(a);
  lowbit::Fp8MaskedGroupedArgs x;
  x.groups = static_cast<int>(groups);
  x.max_m = static_cast<int>(max_m);
  x.n = n;
  x.k = k;
  x.a = a.data_ptr();
  x.b = b.data_ptr();
  x.d = out.data_ptr();
  x.sfa = sfa.data_ptr<float>();
  x.sfa_ld = sfa.size(2);
  x.sfb = sfb.data_ptr<float>();
  x.masked_m = masked_m.data_ptr<int32_t>();
  x.out_type = ot;
  x.workspace_bytes = lowbit::fp8_grouped_masked_workspace_size(x.groups);
  const auto [ws, base] = aligned_scratch(a, x.workspace_bytes, 128);
  x.workspace = base;
  raise_if_error(lowbit::fp8_grouped_gemm_masked(x, stream));
  check_grouped_status(check, lowbit::fp8_grouped_check_status, base, stream);
  return out;
}

Tensor fp8_grouped_gemm_masked(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                               const Tensor& masked_m, std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_masked(a, b, sfa, sfb, masked_m, out_dtype, check, true);
}

Tensor fp8_grouped_gemm_masked_meta(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                                    const Tensor& masked_m, std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_masked(a, b, sfa, sfb, masked_m, out_dtype, check, false);
}

// The contiguous layout (DeepGEMM's m_grouped_fp8_gemm_nt_contiguous): a [rows, K], b [G, N, K],
// sfa [ceil(K/128), ld] over all rows (quantize_fp8_1x128 of a), sfb [G, ceil(N/128), ceil(K/128)],
// offsets int32 [G + 1] on the device.
Tensor fp8_contiguous(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb, const Tensor& offsets,
                      std::optional<at::ScalarType> out_dtype, bool check, bool run) {
  expect(a, "a", at::kFloat8_e4m3fn, 2);
  expect(b, "b", at::kFloat8_e4m3fn, 3);
  expect(sfa, "sfa", at::kFloat, 2);
  expect(sfb, "sfb", at::kFloat, 3);
  expect(offsets, "offsets", at::kInt, 1);
  const int64_t rows = a.size(0), k = a.size(1), groups = b.size(0), n = b.size(1);
  TORCH_CHECK_VALUE(b.size(2) == k, "lowbit: a is [rows, K] and b [G, N, K]; got a ", a.sizes(), " and b ", b.sizes());
  const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
  TORCH_CHECK_VALUE(sfa.size(0) == kb && sfa.size(1) >= rows,
                    "lowbit: sfa must be [ceil(K / 128), ld] with ld >= rows, got ", sfa.sizes());
  TORCH_CHECK_VALUE(sfb.size(0) == groups && sfb.size(1) == nb && sfb.size(2) == kb,
                    "lowbit: sfb must be [G, ceil(N / 128), ceil(K / 128)], got ", sfb.sizes());
  TORCH_CHECK_VALUE(offsets.size(0) == groups + 1, "lowbit: offsets must hold G + 1 row offsets (", groups + 1,
                    "), got ", offsets.size(0));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{b, "b"}, {sfa, "sfa"}, {sfb, "sfb"},
                                {offsets, "offsets"}})
    expect_cuda(t, name, a);
  expect_cuda(a, "a", a);
  TORCH_CHECK_VALUE(groups >= 1 && groups <= INT32_MAX && rows >= 1 && rows <= INT32_MAX,
                    "lowbit: groups and rows must be in [1, 2^31), got ", groups, " and ", rows);
  const lowbit::OutType ot = out_type(out_dtype);
  Tensor out = at::empty({rows, n}, a.options().dtype(scalar_type(ot)));
  if (!run) return out;
  const c10::DeviceGuard guard(a.device());
  const cudaStream_t stream = current_stream(a);
  lowbit::Fp8ContiguousGroupedArgs x;
  x.groups = static_cast<int>(groups);
  x.rows = rows;
  x.n = n;
  x.k = k;
  x.a = a.data_ptr();
  x.b = b.data_ptr();
  x.d = out.data_ptr();
  x.sfa = sfa.data_ptr<float>();
  x.sfa_ld = sfa.size(1);
  x.sfb = sfb.data_ptr<float>();
  x.offsets = offsets.data_ptr<int32_t>();
  x.out_type = ot;
  x.workspace_bytes = lowbit::fp8_grouped_contiguous_workspace_size(x.groups);
  const auto [ws, base] = aligned_scratch(a, x.workspace_bytes, 128);
  x.workspace = base;
  raise_if_error(lowbit::fp8_grouped_gemm_contiguous(x, stream));
  check_grouped_status(check, lowbit::fp8_grouped_check_status, base, stream);
  return out;
}

Tensor fp8_grouped_gemm_contiguous(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                                   const Tensor& offsets, std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_contiguous(a, b, sfa, sfb, offsets, out_dtype, check, true);
}

Tensor fp8_grouped_gemm_contiguous_meta(const Tensor& a, const Tensor& b, const Tensor& sfa, const Tensor& sfb,
                                        const Tensor& offsets, std::optional<at::ScalarType> out_dtype, bool check) {
  return fp8_contiguous(a, b, sfa, sfb, offsets, out_dtype, check, false);
}

// One global scale per group; none given: 1.
float group_scale(at::ArrayRef<double> scales, size_t g) { return scales.empty() ? 1.0f : static_cast<float>(scales[g]); }

std::vector<Tensor> nvfp4_grouped(at::TensorList a, const std::optional<at::TensorList>& a_scales,
                                  at::TensorList b_prepacked, at::IntArrayRef n, at::ArrayRef<double> a_global_scales,
                                  at::ArrayRef<double> b_global_scales, bool check, bool run) {
  const size_t groups = a.size();
  const bool fp4 = a_scales.has_value();
  same_length(groups, {{b_prepacked.size(), "b_prepacked"}, {n.size(), "n"}, {fp4 ? a_scales->size() : groups, "a_scales"}});
  if (!a_global_scales.empty()) same_length(groups, {{a_global_scales.size(), "a_global_scales"}});
  if (!b_global_scales.empty()) same_length(groups, {{b_global_scales.size(), "b_global_scales"}});
  std::vector<Tensor> out;
  std::vector<lowbit::Nvfp4GroupedProblem> desc(groups);
  // The staged BF16 copy of NVFP4 activations holds every group's (sum of m * k, saturated past
  // lowbit's limit so that lowbit refuses it); the token tile is picked for the groups' mean M.
  int64_t staged = 0, tokens = 0, busy = 0;
  for (size_t g = 0; g < groups; ++g) {
    const std::optional<Tensor> scales = fp4 ? std::optional<Tensor>((*a_scales)[g]) : std::nullopt;
    int64_t k = 0;
    in_group(g, [&] {
      k = nvfp4_checks(a[g], scales, b_prepacked[g], n[g]);
      expect_cuda(a[g], "a", a[0]);
    });
    const int64_t m = a[g].size(0);
    out.push_back(at::empty({m, n[g]}, a[g].options().dtype(at::kBFloat16)));
    desc[g] = lowbit::Nvfp4GroupedProblem{narrow(m, g), narrow(n[g], g), narrow(k, g), 0,
                                          address(a[g]), fp4 ? address(*scales) : nullptr,
                                          address(b_prepacked[g]), address(out[g]),
                                          fp4 ? group_scale(a_global_scales, g) : 1.0f,
                                          group_scale(b_global_scales, g)};
    staged = std::min(staged + m * k, lowbit::kNvfp4MaxStagedElements + 1);
    tokens += m;
    busy += m > 0;
  }
  raise_if_error(lowbit::nvfp4_grouped_validate(desc.data(), static_cast<int>(std::min<size_t>(groups, INT_MAX)), fp4));
  if (!run) return out;
  const c10::DeviceGuard guard(a[0].device());
  const cudaStream_t stream = current_stream(a[0]);
  const Tensor problems = upload(desc.data(), groups * sizeof(desc[0]), a[0], stream);
  lowbit::Nvfp4GroupedArgs g;
  g.problems = static_cast<const lowbit::Nvfp4GroupedProblem*>(problems.data_ptr());
  g.groups = static_cast<int>(groups);
  g.nvfp4_activations = fp4;
  g.max_activation_elements = fp4 ? std::max<int64_t>(staged, 32) : 0;
  g.expected_m = busy > 0 ? (tokens + busy - 1) / busy : 0;
  // The descriptor copy runs just before the first kernel: there is no kernel of the caller's for
  // it to overlap with programmatic dependent launch.
  g.pdl_first = false;
  g.workspace_bytes = lowbit::nvfp4_grouped_workspace_size(g.groups, g.max_activation_elements);
  const auto [ws, base] = aligned_scratch(a[0], g.workspace_bytes, 256);
  g.workspace = base;
  raise_if_error(lowbit::nvfp4_grouped_gemm(g, stream));
  check_grouped_status(check, lowbit::nvfp4_grouped_check_status, base, stream);
  return out;
}

std::vector<Tensor> nvfp4_grouped_gemm(at::TensorList a, const std::optional<at::TensorList>& a_scales,
                                       at::TensorList b_prepacked, at::IntArrayRef n, at::ArrayRef<double> a_global_scales,
                                       at::ArrayRef<double> b_global_scales, bool check) {
  return nvfp4_grouped(a, a_scales, b_prepacked, n, a_global_scales, b_global_scales, check, true);
}

std::vector<Tensor> nvfp4_grouped_gemm_meta(at::TensorList a, const std::optional<at::TensorList>& a_scales,
                                            at::TensorList b_prepacked, at::IntArrayRef n,
                                            at::ArrayRef<double> a_global_scales, at::ArrayRef<double> b_global_scales,
                                            bool check) {
  return nvfp4_grouped(a, a_scales, b_prepacked, n, a_global_scales, b_global_scales, check, false);
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

// x [M, K] and w [experts, N, K]: the sizes of a call (lowbit checks their limits).
lowbit::MoeShape moe_shape(const Tensor& x, const Tensor& w, int64_t top_k) {
  expect(x, "x", at::kBFloat16, 2);
  expect(w, "w", at::kFloat8_e4m3fn, 3);
  TORCH_CHECK_VALUE(w.size(2) == x.size(1), "lowbit: w is [experts, N, K] and x [M, K]");
  expect_cuda(x, "x", x);
  expect_cuda(w, "w", x);
  TORCH_CHECK_VALUE(x.size(0) <= INT32_MAX && w.size(0) <= INT32_MAX && w.size(1) <= INT32_MAX &&
                        w.size(2) <= INT32_MAX && top_k >= 0 && top_k <= INT32_MAX,
                    "lowbit: sizes out of range");
  return lowbit::MoeShape{static_cast<int>(x.size(0)), static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                          static_cast<int>(w.size(0)), static_cast<int>(top_k)};
}

lowbit::MoeShape moe_checks(const Tensor& x, const Tensor& w, const Tensor& w_scales, const std::optional<Tensor>& logits,
                            const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                            int64_t top_k) {
  const lowbit::MoeShape shape = moe_shape(x, w, top_k);
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
  expect_cuda(w_scales, "w_scales", x);
  return shape;
}

lowbit::MoeReduce moe_reduce(bool deterministic) {
  return deterministic ? lowbit::MoeReduce::kDeterministic : lowbit::MoeReduce::kAtomic;
}

// The arguments of fused_moe_fp8 and of its stages, writing y.
lowbit::FusedMoeArgs moe_args(const lowbit::MoeShape& shape, const Tensor& x, const Tensor& w, const Tensor& w_scales,
                              const std::optional<Tensor>& logits, const std::optional<Tensor>& topk_ids,
                              const std::optional<Tensor>& topk_weights, double softcap, bool renormalize,
                              bool deterministic, const Tensor& y, lowbit::OutType ot) {
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
  a.reduce = moe_reduce(deterministic);
  return a;
}

Tensor fused_moe_fp8(const Tensor& x, const Tensor& w, const Tensor& w_scales, const std::optional<Tensor>& logits,
                     const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights, int64_t top_k,
                     double softcap, bool renormalize, bool deterministic, std::optional<at::ScalarType> out_dtype) {
  const lowbit::MoeShape shape = moe_checks(x, w, w_scales, logits, topk_ids, topk_weights, top_k);
  const lowbit::OutType ot = out_type(out_dtype);
  Tensor y = at::empty({x.size(0), w.size(1)}, x.options().dtype(scalar_type(ot)));
  const c10::DeviceGuard guard(x.device());
  const lowbit::FusedMoeArgs a =
      moe_args(shape, x, w, w_scales, logits, topk_ids, topk_weights, softcap, renormalize, deterministic, y, ot);
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

// ---- fused MoE, stage by stage -------------------------------------------------------------------

// The workspace bytes of a shape; a shape lowbit refuses raises its reason.
size_t moe_workspace_bytes(const lowbit::MoeShape& shape, bool deterministic, lowbit::OutType ot) {
  const size_t bytes = lowbit::fused_moe_workspace_size(shape, moe_reduce(deterministic), ot);
  if (bytes == 0) {  // refused: the view states the rule
    lowbit::MoeWorkspaceView v;
    raise_if_error(lowbit::moe_workspace_view(shape, moe_reduce(deterministic), ot, nullptr, 0, &v));
  }
  return bytes;
}

// The stages keep their state in a caller-held workspace, zero-filled here. lowbit needs no
// initialization (lowbit/moe.h); zeros make a view read before any stage ran show no routing and an
// ok status rather than stale bytes.
Tensor fused_moe_workspace(const Tensor& x, const Tensor& w, int64_t top_k, bool deterministic,
                           std::optional<at::ScalarType> out_dtype) {
  const size_t bytes = moe_workspace_bytes(moe_shape(x, w, top_k), deterministic, out_type(out_dtype));
  return at::zeros({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
}

Tensor fused_moe_workspace_meta(const Tensor& x, const Tensor& w, int64_t top_k, bool deterministic,
                                std::optional<at::ScalarType> out_dtype) {
  const size_t bytes = moe_workspace_bytes(moe_shape(x, w, top_k), deterministic, out_type(out_dtype));
  return at::empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
}

// [bytes, rows, then the byte offsets of topk_ids, topk_weights, counts, offsets, tile_start, xq,
// x_scales, row_pair, row_weight, status] of a workspace (moe_workspace_view): sizes only, so the
// Python side makes the views (a custom operator returning views of its input would alias it).
std::vector<int64_t> fused_moe_workspace_layout(int64_t m, int64_t n, int64_t k, int64_t experts, int64_t top_k,
                                                bool deterministic, std::optional<at::ScalarType> out_dtype) {
  for (int64_t v : {m, n, k, experts, top_k})
    TORCH_CHECK_VALUE(v >= INT32_MIN && v <= INT32_MAX, "lowbit: sizes out of range");
  const lowbit::MoeShape shape{static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), static_cast<int>(experts),
                               static_cast<int>(top_k)};
  const lowbit::OutType ot = out_type(out_dtype);
  const size_t bytes = moe_workspace_bytes(shape, deterministic, ot);
  // Offsets from a stand-in base: the view only adds them to the address it is given.
  auto* base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  lowbit::MoeWorkspaceView v;
  raise_if_error(lowbit::moe_workspace_view(shape, moe_reduce(deterministic), ot, base, bytes, &v));
  auto at_ = [base](const void* p) { return static_cast<int64_t>(static_cast<const uint8_t*>(p) - base); };
  return {static_cast<int64_t>(bytes), v.rows,         at_(v.topk_ids),   at_(v.topk_weights),
          at_(v.counts),               at_(v.offsets), at_(v.tile_start), at_(v.xq),
          at_(v.x_scales),             at_(v.row_pair), at_(v.row_weight), at_(v.status)};
}

lowbit::MoeStage moe_stage(const std::string& s) {
  if (s == "route") return lowbit::MoeStage::kRoute;
  if (s == "layout") return lowbit::MoeStage::kLayout;
  if (s == "quantize_gather") return lowbit::MoeStage::kQuantizeGather;
  if (s == "expert_gemm") return lowbit::MoeStage::kExpertGemm;
  if (s == "finish") return lowbit::MoeStage::kFinish;
  TORCH_CHECK_VALUE(false, "lowbit: stage must be 'route', 'layout', 'quantize_gather', 'expert_gemm' or 'finish', got '",
                    s, "'");
}

// Checks a stage's arguments; returns y's output type.
lowbit::OutType moe_stage_checks(const std::string& stage, const Tensor& x, const Tensor& w, const Tensor& w_scales,
                                 const std::optional<Tensor>& logits, const std::optional<Tensor>& topk_ids,
                                 const std::optional<Tensor>& topk_weights, int64_t top_k, const Tensor& workspace,
                                 const Tensor& y, bool deterministic, lowbit::MoeShape* shape) {
  moe_stage(stage);
  *shape = moe_checks(x, w, w_scales, logits, topk_ids, topk_weights, top_k);
  TORCH_CHECK_TYPE(y.scalar_type() == at::kBFloat16 || y.scalar_type() == at::kFloat,
                   "lowbit: y must be bfloat16 or float32, got ", c10::toString(y.scalar_type()));
  expect(y, "y", y.scalar_type(), 2);
  TORCH_CHECK_VALUE(y.size(0) == x.size(0) && y.size(1) == w.size(1), "lowbit: y must be [M, N] = [", x.size(0), ", ",
                    w.size(1), "]");
  expect_cuda(y, "y", x);
  const lowbit::OutType ot = y.scalar_type() == at::kFloat ? lowbit::OutType::kFP32 : lowbit::OutType::kBF16;
  expect(workspace, "workspace", at::kByte, 1);
  expect_cuda(workspace, "workspace", x);
  const size_t bytes = moe_workspace_bytes(*shape, deterministic, ot);
  TORCH_CHECK_VALUE(static_cast<size_t>(workspace.numel()) >= bytes, "lowbit: workspace must hold the ", bytes,
                    " bytes fused_moe_workspace makes for this shape, deterministic and y's dtype; got ",
                    workspace.numel());
  return ot;
}

void fused_moe_fp8_stage(const std::string& stage, const Tensor& x, const Tensor& w, const Tensor& w_scales,
                         const std::optional<Tensor>& logits, const std::optional<Tensor>& topk_ids,
                         const std::optional<Tensor>& topk_weights, int64_t top_k, const Tensor& workspace,
                         const Tensor& y, double softcap, bool renormalize, bool deterministic, bool check) {
  lowbit::MoeShape shape;
  const lowbit::OutType ot =
      moe_stage_checks(stage, x, w, w_scales, logits, topk_ids, topk_weights, top_k, workspace, y, deterministic, &shape);
  const c10::DeviceGuard guard(x.device());
  const cudaStream_t stream = current_stream(x);
  const lowbit::FusedMoeArgs a =
      moe_args(shape, x, w, w_scales, logits, topk_ids, topk_weights, softcap, renormalize, deterministic, y, ot);
  // The stages are the split pipeline's. fused_moe_fp8's tiny-batch path (a few tokens, atomic
  // mode) routes inside its GEMM and has no stages; deterministic mode never takes it, so there the
  // stages run exactly the kernels fused_moe_fp8 runs.
  lowbit::MoeConfig config;
  config.tiny = 0;
  raise_if_error(lowbit::moe_run_stage(moe_stage(stage), a, workspace.data_ptr(), workspace.numel(), stream, &config));
  // The status word says which routing pair had an expert id out of range; reading it waits for the GPU.
  if (check && !capturing(stream))
    raise_if_error(lowbit::moe_check_status(shape, a.reduce, ot, workspace.data_ptr(), workspace.numel(), stream));
}

void fused_moe_fp8_stage_meta(const std::string& stage, const Tensor& x, const Tensor& w, const Tensor& w_scales,
                              const std::optional<Tensor>& logits, const std::optional<Tensor>& topk_ids,
                              const std::optional<Tensor>& topk_weights, int64_t top_k, const Tensor& workspace,
                              const Tensor& y, double, bool, bool deterministic, bool) {
  lowbit::MoeShape shape;
  moe_stage_checks(stage, x, w, w_scales, logits, topk_ids, topk_weights, top_k, workspace, y, deterministic, &shape);
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
  m.def("fp8_grouped_gemm(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, *, ScalarType? out_dtype=None, "
        "bool check=False) -> Tensor[]");
  m.def("fp8_grouped_gemm_masked(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor masked_m, *, "
        "ScalarType? out_dtype=None, bool check=False) -> Tensor");
  m.def("fp8_grouped_gemm_contiguous(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor offsets, *, "
        "ScalarType? out_dtype=None, bool check=False) -> Tensor");
  m.def("nvfp4_grouped_gemm(Tensor[] a, Tensor[]? a_scales, Tensor[] b_prepacked, int[] n, *, "
        "float[] a_global_scales=[], float[] b_global_scales=[], bool check=False) -> Tensor[]");
  m.def("fused_moe_workspace(Tensor x, Tensor w, int top_k, *, bool deterministic=False, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("fused_moe_workspace_layout(int m, int n, int k, int experts, int top_k, *, bool deterministic=False, "
        "ScalarType? out_dtype=None) -> int[]",
        &fused_moe_workspace_layout);
  m.def("fused_moe_fp8_stage(str stage, Tensor x, Tensor w, Tensor w_scales, Tensor? logits, Tensor? topk_ids, "
        "Tensor? topk_weights, int top_k, Tensor(a!) workspace, Tensor(b!) y, *, float softcap=0.0, "
        "bool renormalize=True, bool deterministic=False, bool check=False) -> ()");
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
  m.impl("fp8_grouped_gemm", &fp8_grouped_gemm);
  m.impl("fp8_grouped_gemm_masked", &fp8_grouped_gemm_masked);
  m.impl("fp8_grouped_gemm_contiguous", &fp8_grouped_gemm_contiguous);
  m.impl("nvfp4_grouped_gemm", &nvfp4_grouped_gemm);
  m.impl("fused_moe_workspace", &fused_moe_workspace);
  m.impl("fused_moe_fp8_stage", &fused_moe_fp8_stage);
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
  m.impl("fp8_grouped_gemm", &fp8_grouped_gemm_meta);
  m.impl("fp8_grouped_gemm_masked", &fp8_grouped_gemm_masked_meta);
  m.impl("fp8_grouped_gemm_contiguous", &fp8_grouped_gemm_contiguous_meta);
  m.impl("nvfp4_grouped_gemm", &nvfp4_grouped_gemm_meta);
  m.impl("fused_moe_workspace", &fused_moe_workspace_meta);
  m.impl("fused_moe_fp8_stage", &fused_moe_fp8_stage_meta);
}
