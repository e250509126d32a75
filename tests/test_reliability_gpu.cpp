// What an inference server does to a library besides calling it right: many host threads calling
// every family at once from a cold start, host memory passed where device memory belongs, calls
// refused one after the other, grouped calls with bad groups. No input may end the CUDA context,
// leave an error pending, or give a thread an error or a wrong answer.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/arg_check.h"
#include "common/driver_entry.h"
#include "device_fill.h"
#include "gpu_test_util.h"
#include "lowbit/lowbit.h"
#include "lowbit/sparse.h"
#include "test_seed.h"

using namespace lowbit;
using lowbit_test::Buf;

namespace {

class ReliabilityGpu : public lowbit_test::HopperTest {};

// Valid arguments of every family on device buffers this object owns; outputs, workspaces and
// grouped descriptors are per caller (Slot), since calls that run at once need their own.
struct Problems {
  // Sizes: small, with partial tiles; M = 100 for the dense GEMMs splits K on 132 SMs.
  static constexpr int64_t M = 100, N = 512, K = 1024;
  static constexpr int64_t kPatchP = 49, kPatchM = 2 * kPatchP, kPatchN = 256, kPatchK = 768;
  static constexpr int64_t kNvfp4M = 16;
  static constexpr int kGroups = 3;
  static constexpr MoeShape kMoe{8, 256, 512, 16, 2};

  std::vector<std::unique_ptr<Buf>> bufs;
  void* buf(size_t bytes) {
    bufs.push_back(std::make_unique<Buf>(bytes));
    return bufs.back()->p;
  }

  const void *a8, *b8, *bias, *pos, *patches, *pweight, *sp_values, *sp_meta, *sp_b;
  const void *act_bf16, *act_fp4, *act_fp4_scales, *w_fp4;
  const float *sfa, *sfb, *moe_logits, *w_scales;
  const void *moe_x, *moe_w;

  // Fills every input; asserts on failure (call through ASSERT_NO_FATAL_FAILURE).
  void make(uint64_t seed) {
    using namespace lowbit::bench;
    auto e4m3 = [&](int64_t count, uint64_t s) {
      void* p = buf(count);
      EXPECT_EQ(fill_e4m3_uniform(p, count, 2.0f, s, nullptr), cudaSuccess);
      return p;
    };
    auto bf16 = [&](int64_t count, uint64_t s) {
      void* p = buf(count * 2);
      EXPECT_EQ(fill_bf16_uniform(p, count, 1.0f, s, nullptr), cudaSuccess);
      return p;
    };
    auto scales = [&](int64_t count, uint64_t s) {
      auto* p = static_cast<float*>(buf(count * 4));
      EXPECT_EQ(fill_f32_scales(p, count, -3, 1, false, s, nullptr), cudaSuccess);
      return p;
    };
    a8 = e4m3(M * K, seed + 1);
    b8 = e4m3(N * K, seed + 2);
    bias = bf16(N, seed + 3);
    patches = e4m3(kPatchM * kPatchK, seed + 4);
    pweight = e4m3(kPatchN * kPatchK, seed + 5);
    pos = bf16(kPatchP * kPatchN, seed + 6);
    // 2:4-sparse A (M x K), compressed on the device.
    void* dense = e4m3(M * K, seed + 7);
    EXPECT_EQ(mask_2_4(dense, M * K, 1, seed + 8, nullptr), cudaSuccess);
    void* values = buf(M * K / 2);
    void* meta = buf(sparse24_meta_bytes(M, K, SparseType::kE4M3));
    EXPECT_TRUE(sparse24_compress(dense, M, K, SparseType::kE4M3, true, values, meta, nullptr, nullptr).ok());
    sp_values = values;
    sp_meta = meta;
    sp_b = e4m3(N * K, seed + 9);
    // NVFP4: weights [N, K] prepacked; activations BF16, and NVFP4 with E4M3 scales in [0.25, 2].
    void* packed = buf(N * K / 2);
    void* wsc = buf(N * K / 16);
    EXPECT_EQ(fill_u8_range(packed, N * K / 2, 0, 255, seed + 10, nullptr), cudaSuccess);
    EXPECT_EQ(fill_u8_range(wsc, N * K / 16, 0x28, 0x40, seed + 11, nullptr), cudaSuccess);
    void* pre = buf(nvfp4_prepacked_bytes(N, K));
    Nvfp4PrepackArgs pp;
    pp.n = N;
    pp.k = K;
    pp.packed = packed;
    pp.scales = wsc;
    pp.out = pre;
    pp.out_bytes = nvfp4_prepacked_bytes(N, K);
    EXPECT_TRUE(nvfp4_prepack_weights(pp, nullptr).ok());
    w_fp4 = pre;
    act_bf16 = bf16(std::max(M, kNvfp4M) * K, seed + 12);
    void* ap = buf(kNvfp4M * K / 2);
    void* as = buf(kNvfp4M * K / 16);
    EXPECT_EQ(fill_u8_range(ap, kNvfp4M * K / 2, 0, 255, seed + 13, nullptr), cudaSuccess);
    EXPECT_EQ(fill_u8_range(as, kNvfp4M * K / 16, 0x28, 0x40, seed + 14, nullptr), cudaSuccess);
    act_fp4 = ap;
    act_fp4_scales = as;
    // Block-scaled: 1x128 A scales [K/128, M rounded to 4], 128x128 B scales [N/128, K/128].
    sfa = scales((K / 128) * ((M + 3) / 4 * 4), seed + 15);
    sfb = scales((N / 128) * (K / 128), seed + 16);
    // MoE.
    moe_logits = scales(kMoe.m * kMoe.experts, seed + 17);
    moe_x = bf16(int64_t{kMoe.m} * kMoe.k, seed + 18);
    moe_w = e4m3(int64_t{kMoe.experts} * kMoe.n * kMoe.k, seed + 19);
    w_scales = scales(int64_t{kMoe.experts} * ((kMoe.n + 127) / 128) * (kMoe.k / 128), seed + 20);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// One caller's output, workspace and grouped descriptors for one family.
struct Slot {
  void* out = nullptr;
  size_t out_bytes = 0;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  void* desc = nullptr;  // grouped calls: device descriptors pointing into `out`
};

struct Family {
  const char* name;
  size_t out_bytes;
  size_t ws_bytes;
  // Writes the family's device descriptors for a slot (grouped calls), else nothing.
  std::function<void(const Problems&, Slot&)> describe;
  std::function<Status(const Problems&, const Slot&, cudaStream_t)> run;
};

using P = Problems;

Fp8GemmArgs fp8_args(const P& p, const Slot& s) {
  Fp8GemmArgs a;
  a.m = P::M;
  a.n = P::N;
  a.k = P::K;
  a.a = p.a8;
  a.b = p.b8;
  a.d = s.out;
  a.bias = p.bias;
  a.activation = Activation::kGelu;
  a.alpha = 0.5f;
  a.workspace = s.ws;
  a.workspace_bytes = s.ws_bytes;
  return a;
}
PatchEmbedArgs patch_args(const P& p, const Slot& s) {
  PatchEmbedArgs a;
  a.m = P::kPatchM;
  a.n = P::kPatchN;
  a.k = P::kPatchK;
  a.patches = p.patches;
  a.weight = p.pweight;
  a.bias = p.bias;
  a.bias_len = P::kPatchN;
  a.pos = p.pos;
  a.pos_rows = P::kPatchP;
  a.pos_cols = P::kPatchN;
  a.out = s.out;
  a.workspace = s.ws;
  a.workspace_bytes = s.ws_bytes;
  return a;
}
Sparse24GemmArgs sparse_args(const P& p, const Slot& s) {
  Sparse24GemmArgs a;
  a.m = P::M;
  a.n = P::N;
  a.k = P::K;
  a.a_values = p.sp_values;
  a.a_meta = p.sp_meta;
  a.b = p.sp_b;
  a.d = s.out;
  a.workspace = s.ws;
  a.workspace_bytes = s.ws_bytes;
  return a;
}
Nvfp4GemmArgs nvfp4_args(const P& p, const Slot& s, bool fp4_act) {
  Nvfp4GemmArgs a;
  a.m = P::kNvfp4M;
  a.n = P::N;
  a.k = P::K;
  if (fp4_act) {
    a.a_packed = p.act_fp4;
    a.a_scales = p.act_fp4_scales;
    a.a_global_scale = 0.5f;
  } else {
    a.a_bf16 = p.act_bf16;
  }
  a.b_prepacked = p.w_fp4;
  a.b_global_scale = 0.25f;
  a.d = s.out;
  a.workspace = s.ws;
  a.workspace_bytes = s.ws_bytes;
  return a;
}
Fp8BlockScaledArgs bs_args(const P& p, const Slot& s) {
  Fp8BlockScaledArgs a;
  a.m = P::M;
  a.n = P::N;
  a.k = P::K;
  a.a = p.a8;
  a.b = p.b8;
  a.d = s.out;
  a.sfa = p.sfa;
  a.sfa_ld = (P::M + 3) / 4 * 4;
  a.sfb = p.sfb;
  return a;
}
FusedMoeArgs moe_args(const P& p, const Slot& s) {
  FusedMoeArgs a;
  a.shape = P::kMoe;
  a.logits = p.moe_logits;
  a.x = p.moe_x;
  a.w = p.moe_w;
  a.w_scales = p.w_scales;
  a.y = s.out;
  a.y_type = OutType::kBF16;
  a.reduce = MoeReduce::kDeterministic;  // bitwise reproducible, so threads compare exactly
  return a;
}

// Groups g = 0, 1, 2 take rows [0, 40), [40, 100) and none of A, D at row offsets.
std::vector<Fp8GroupedProblem> fp8_groups(const P& p, const Slot& s) {
  std::vector<Fp8GroupedProblem> g;
  const int rows[P::kGroups] = {40, 60, 0};
  int64_t r0 = 0;
  for (int i = 0; i < P::kGroups; ++i) {
    g.push_back(Fp8GroupedProblem{rows[i], static_cast<int32_t>(P::N), static_cast<int32_t>(P::K), 0,
                                  static_cast<const uint8_t*>(p.a8) + r0 * P::K, p.b8,
                                  static_cast<uint8_t*>(s.out) + r0 * P::N * 2, p.sfa + r0, p.sfb,
                                  (P::M + 3) / 4 * 4});
    r0 += rows[i];
  }
  // sfa rows are offset by r0 inside one [K/128, ld] array: 16-byte aligned needs r0 % 4 == 0.
  return g;
}
std::vector<Nvfp4GroupedProblem> nvfp4_groups(const P& p, const Slot& s) {
  std::vector<Nvfp4GroupedProblem> g;
  const int rows[P::kGroups] = {7, 0, 9};
  int64_t r0 = 0;
  for (int i = 0; i < P::kGroups; ++i) {
    g.push_back(Nvfp4GroupedProblem{rows[i], static_cast<int32_t>(P::N), static_cast<int32_t>(P::K), 0,
                                    static_cast<const uint16_t*>(p.act_bf16) + r0 * P::K, nullptr, p.w_fp4,
                                    static_cast<uint16_t*>(s.out) + r0 * P::N, 1.0f, 0.25f});
    r0 += rows[i];
  }
  return g;
}

size_t fp8_ws() {
  Fp8GemmConfig c;
  c.block_n = 64;
  c.splits = 8;
  return fp8_gemm_workspace_size(P::M, P::N, P::K, c);
}

std::vector<Family> families() {
  std::vector<Family> f;
  auto none = [](const P&, Slot&) {};
  f.push_back({"fp8_gemm", P::M * P::N * 2, fp8_ws(), none,
               [](const P& p, const Slot& s, cudaStream_t st) { return fp8_gemm(fp8_args(p, s), st); }});
  f.push_back({"patch_embed_fp8", P::kPatchM * P::kPatchN * 2, fp8_ws(), none,
               [](const P& p, const Slot& s, cudaStream_t st) { return patch_embed_fp8(patch_args(p, s), st); }});
  f.push_back({"sparse24_gemm", P::M * P::N * 2, fp8_ws(), none,
               [](const P& p, const Slot& s, cudaStream_t st) { return sparse24_gemm(sparse_args(p, s), st); }});
  Nvfp4GemmConfig split;
  split.splits = 4;
  const size_t nv_ws = nvfp4_gemm_workspace_size(P::kNvfp4M, P::N, P::K, true, split);
  f.push_back({"nvfp4_gemm (BF16 activations)", P::kNvfp4M * P::N * 2, nv_ws, none,
               [](const P& p, const Slot& s, cudaStream_t st) { return nvfp4_gemm(nvfp4_args(p, s, false), st); }});
  f.push_back({"nvfp4_gemm (NVFP4 activations)", P::kNvfp4M * P::N * 2, nv_ws, none,
               [](const P& p, const Slot& s, cudaStream_t st) { return nvfp4_gemm(nvfp4_args(p, s, true), st); }});
  f.push_back({"fp8_blockscaled_gemm", P::M * P::N * 2, 0, none,
               [](const P& p, const Slot& s, cudaStream_t st) { return fp8_blockscaled_gemm(bs_args(p, s), st); }});
  f.push_back({"fp8_grouped_gemm", P::M * P::N * 2, fp8_grouped_workspace_size(P::kGroups),
               [](const P& p, Slot& s) {
                 const auto g = fp8_groups(p, s);
                 ASSERT_EQ(cudaMemcpy(s.desc, g.data(), g.size() * sizeof(g[0]), cudaMemcpyHostToDevice), cudaSuccess);
               },
               [](const P&, const Slot& s, cudaStream_t st) {
                 return fp8_grouped_gemm(static_cast<const Fp8GroupedProblem*>(s.desc), P::kGroups, OutType::kBF16,
                                         s.ws, s.ws_bytes, st);
               }});
  f.push_back({"nvfp4_grouped_gemm", 16 * P::N * 2, nvfp4_grouped_workspace_size(P::kGroups, 0),
               [](const P& p, Slot& s) {
                 const auto g = nvfp4_groups(p, s);
                 ASSERT_EQ(cudaMemcpy(s.desc, g.data(), g.size() * sizeof(g[0]), cudaMemcpyHostToDevice), cudaSuccess);
               },
               [](const P&, const Slot& s, cudaStream_t st) {
                 Nvfp4GroupedArgs a;
                 a.problems = static_cast<const Nvfp4GroupedProblem*>(s.desc);
                 a.groups = P::kGroups;
                 a.workspace = s.ws;
                 a.workspace_bytes = s.ws_bytes;
                 return nvfp4_grouped_gemm(a, st);
               }});
  f.push_back({"fused_moe_fp8", static_cast<size_t>(P::kMoe.m) * P::kMoe.n * 2,
               fused_moe_workspace_size(P::kMoe, MoeReduce::kDeterministic, OutType::kBF16), none,
               [](const P& p, const Slot& s, cudaStream_t st) {
                 return fused_moe_fp8(moe_args(p, s), s.ws, s.ws_bytes, st);
               }});
  return f;
}

// Device buffers for one slot of each family, made by the calling (main) thread: outputs
// poisoned, workspaces zero-filled, descriptors written.
struct Slots {
  std::vector<std::unique_ptr<Buf>> bufs;
  std::vector<Slot> slots;  // one per family
  void make(const P& p, const std::vector<Family>& fams) {
    for (const auto& f : fams) {
      Slot s;
      bufs.push_back(std::make_unique<Buf>(f.out_bytes));
      s.out = bufs.back()->p;
      s.out_bytes = f.out_bytes;
      bufs.push_back(std::make_unique<Buf>(f.ws_bytes + 256));
      s.ws = bufs.back()->p;
      s.ws_bytes = f.ws_bytes;
      EXPECT_EQ(cudaMemset(s.ws, 0, f.ws_bytes + 256), cudaSuccess);
      EXPECT_EQ(cudaMemset(s.out, 0xFF, f.out_bytes), cudaSuccess);
      bufs.push_back(std::make_unique<Buf>(4096));
      s.desc = bufs.back()->p;
      f.describe(p, s);
      slots.push_back(s);
    }
  }
};

std::vector<uint8_t> download(const Slot& s) {
  std::vector<uint8_t> h(s.out_bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), s.out, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// BF16 words still holding the 0xFFFF poison: outputs never written.
size_t poisoned(const std::vector<uint8_t>& h) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < h.size(); i += 2) n += h[i] == 0xFF && h[i + 1] == 0xFF;
  return n;
}

}  // namespace

// Every family called from many host threads at once, each thread's first CUDA call a lowbit
// call (streams and buffers come from the main thread), each thread starting with a different
// family, from a cold start of lowbit's host caches. Every result is compared bit for bit with
// the same call made afterwards on the main thread, alone (every call here is deterministic), and
// that reference must be fully written. (Before: cuTensorMapEncodeTiled failed with
// CUDA_ERROR_INVALID_CONTEXT on a thread without a current context, 8 of 2400 calls.)
TEST_F(ReliabilityGpu, ColdStartThreadsEveryFamily) {
  const uint64_t seed = lowbit_test::seed();
  P p;
  ASSERT_NO_FATAL_FAILURE(p.make(seed));
  const std::vector<Family> fams = families();
  const int F = static_cast<int>(fams.size());
  const int T = 8, R = 4;
  std::vector<Slots> slots(T);
  std::vector<cudaStream_t> streams(T);
  for (int t = 0; t < T; ++t) {
    ASSERT_NO_FATAL_FAILURE(slots[t].make(p, fams));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking));
  }
  CUDA_OK(cudaDeviceSynchronize());
  std::atomic<int> go{0};
  std::vector<std::string> errors(T);
  std::vector<std::vector<std::vector<uint8_t>>> results(T, std::vector<std::vector<uint8_t>>(F));
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t)
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int r = 0; r < R && errors[t].empty(); ++r)
        for (int j = 0; j < F && errors[t].empty(); ++j) {
          const int fi = (t + j) % F;  // every family is some thread's first call
          const Slot& s = slots[t].slots[fi];
          if (r > 0 && cudaMemsetAsync(s.out, 0xFF, s.out_bytes, streams[t]) != cudaSuccess)
            errors[t] = "poison failed";
          const Status st = fams[fi].run(p, s, streams[t]);
          if (!st.ok()) errors[t] = std::string(fams[fi].name) + ", round " + std::to_string(r) + ": " + st.to_string();
          if (st.ok() && r == R - 1) {
            if (cudaStreamSynchronize(streams[t]) != cudaSuccess) errors[t] = "stream failed";
            results[t][fi].resize(s.out_bytes);
            if (cudaMemcpy(results[t][fi].data(), s.out, s.out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
              errors[t] = "copy failed";
          }
        }
      if (cudaStreamSynchronize(streams[t]) != cudaSuccess && errors[t].empty()) errors[t] = "stream failed";
    });
  go.store(1);
  for (auto& th : threads) th.join();
  for (int t = 0; t < T; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  // The reference: each family once more, alone, on the main thread.
  Slots ref;
  ASSERT_NO_FATAL_FAILURE(ref.make(p, fams));
  for (int fi = 0; fi < F; ++fi) {
    ASSERT_TRUE(fams[fi].run(p, ref.slots[fi], nullptr).ok()) << fams[fi].name;
    CUDA_OK(cudaDeviceSynchronize());
    const auto want = download(ref.slots[fi]);
    EXPECT_EQ(poisoned(want), 0u) << fams[fi].name << ": outputs left unwritten";
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(results[t][fi].size(), want.size()) << fams[fi].name << ", thread " << t;
      EXPECT_EQ(std::memcmp(results[t][fi].data(), want.data(), want.size()), 0)
          << fams[fi].name << ": thread " << t << " differs from the single-threaded result";
    }
  }
  for (auto s : streams) cudaStreamDestroy(s);
}

// Pageable host memory in place of each device pointer of each family: refused with
// InvalidArgument naming the argument, nothing queued, no error left pending, the context alive
// (a valid call of every family then runs). Before, a kernel read the host pointer and the
// illegal address ended the context for the rest of the process. A freed device allocation is
// refused the same way.
TEST_F(ReliabilityGpu, HostPointersAreRefusedEverywhere) {
  int dev = 0, pageable = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, dev));
  if (pageable) GTEST_SKIP() << "this device reads pageable host memory (HMM/ATS): host pointers are legal here";
  P p;
  ASSERT_NO_FATAL_FAILURE(p.make(lowbit_test::seed()));
  const std::vector<Family> fams = families();
  Slots sl;
  ASSERT_NO_FATAL_FAILURE(sl.make(p, fams));
  std::vector<uint8_t> host_mem(1 << 22);
  void* host = host_mem.data() + (256 - reinterpret_cast<uintptr_t>(host_mem.data()) % 256) % 256;
  Buf prepacked(nvfp4_prepacked_bytes(P::N, P::K));
  void* freed = nullptr;
  CUDA_OK(cudaMalloc(&freed, 1 << 20));
  CUDA_OK(cudaFree(freed));
  int cases = 0;
  for (void* bad : {host, freed}) {
    auto expect_refused = [&](const Status& st, const char* what) {
      ++cases;
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.to_string();
      EXPECT_NE(st.message().find("not memory the device can read"), std::string::npos) << what << ": " << st.message();
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what << ": an error was left pending";
    };
    // Each family's valid arguments with one pointer replaced by `bad`, through a setter per field.
    auto each = [&](auto valid, auto run, const char* what,
                    std::initializer_list<std::function<void(decltype(valid)&, void*)>> setters) {
      for (const auto& set : setters) {
        auto a = valid;
        set(a, bad);
        expect_refused(run(a), what);
      }
    };
    using F8 = Fp8GemmArgs;
    each(fp8_args(p, sl.slots[0]), [](const F8& a) { return fp8_gemm(a, nullptr); }, "fp8_gemm",
         {[](F8& a, void* b) { a.a = b; }, [](F8& a, void* b) { a.b = b; }, [](F8& a, void* b) { a.d = b; },
          [](F8& a, void* b) { a.bias = b; }, [](F8& a, void* b) { a.a_scale = static_cast<const float*>(b); },
          [](F8& a, void* b) { a.workspace = b; }, [](F8& a, void* b) { a.residual = b; }});
    using PE = PatchEmbedArgs;
    each(patch_args(p, sl.slots[1]), [](const PE& a) { return patch_embed_fp8(a, nullptr); }, "patch_embed_fp8",
         {[](PE& a, void* b) { a.bias = b; }, [](PE& a, void* b) { a.pos = b; }});
    using SG = Sparse24GemmArgs;
    each(sparse_args(p, sl.slots[2]), [](const SG& a) { return sparse24_gemm(a, nullptr); }, "sparse24_gemm",
         {[](SG& a, void* b) { a.a_values = b; }, [](SG& a, void* b) { a.a_meta = b; },
          [](SG& a, void* b) { a.b = b; }, [](SG& a, void* b) { a.d = b; }});
    using NG = Nvfp4GemmArgs;
    auto nv = [](const NG& a) { return nvfp4_gemm(a, nullptr); };
    each(nvfp4_args(p, sl.slots[4], false), nv, "nvfp4_gemm",
         {[](NG& a, void* b) { a.a_bf16 = b; }, [](NG& a, void* b) { a.b_prepacked = b; },
          [](NG& a, void* b) { a.d = b; }});
    each(nvfp4_args(p, sl.slots[4], true), nv, "nvfp4_gemm (NVFP4 activations)",
         {[](NG& a, void* b) { a.a_packed = b; }, [](NG& a, void* b) { a.a_scales = b; }});
    Nvfp4PrepackArgs pre;
    pre.n = P::N;
    pre.k = P::K;
    pre.packed = p.act_fp4;
    pre.scales = p.act_fp4_scales;
    pre.out = prepacked.p;
    pre.out_bytes = prepacked.bytes;
    using NP = Nvfp4PrepackArgs;
    each(pre, [](const NP& a) { return nvfp4_prepack_weights(a, nullptr); }, "nvfp4_prepack_weights",
         {[](NP& a, void* b) { a.packed = b; }, [](NP& a, void* b) { a.scales = b; }, [](NP& a, void* b) { a.out = b; }});
    using BS = Fp8BlockScaledArgs;
    each(bs_args(p, sl.slots[5]), [](const BS& a) { return fp8_blockscaled_gemm(a, nullptr); }, "fp8_blockscaled_gemm",
         {[](BS& a, void* b) { a.a = b; }, [](BS& a, void* b) { a.b = b; }, [](BS& a, void* b) { a.d = b; },
          [](BS& a, void* b) { a.sfa = static_cast<const float*>(b); },
          [](BS& a, void* b) { a.sfb = static_cast<const float*>(b); }});
    using MA = FusedMoeArgs;
    const Slot& ms = sl.slots[8];
    auto moe = [&ms](const MA& a) { return fused_moe_fp8(a, ms.ws, ms.ws_bytes, nullptr); };
    each(moe_args(p, ms), moe, "fused_moe_fp8",
         {[](MA& a, void* b) { a.logits = b; }, [](MA& a, void* b) { a.x = b; }, [](MA& a, void* b) { a.w = b; },
          [](MA& a, void* b) { a.w_scales = static_cast<const float*>(b); }, [](MA& a, void* b) { a.y = b; }});
    // The caller's routing: both arrays given, one of them bad.
    MA routed = moe_args(p, ms);
    routed.topk_ids = static_cast<const int32_t*>(ms.desc);
    routed.topk_weights = static_cast<const float*>(ms.desc) + 256;
    each(routed, moe, "fused_moe_fp8 (caller's routing)",
         {[](MA& a, void* b) { a.topk_ids = static_cast<const int32_t*>(b); },
          [](MA& a, void* b) { a.topk_weights = static_cast<const float*>(b); }});
    expect_refused(fp8_grouped_gemm(static_cast<const Fp8GroupedProblem*>(bad), 3, OutType::kBF16, sl.slots[6].ws,
                                    sl.slots[6].ws_bytes, nullptr),
                   "fp8_grouped_gemm problems");
    expect_refused(fused_moe_fp8(moe_args(p, sl.slots[8]), bad, sl.slots[8].ws_bytes, nullptr),
                   "fused_moe_fp8 workspace");
    expect_refused(workspace_init(bad, 4096, nullptr), "workspace_init");
    expect_refused(fp8_grouped_check_status(bad, nullptr), "fp8_grouped_check_status");
  }
  EXPECT_EQ(cases, 74);
  // The context is alive: every family still runs.
  for (size_t fi = 0; fi < fams.size(); ++fi) EXPECT_TRUE(fams[fi].run(p, sl.slots[fi], nullptr).ok()) << fams[fi].name;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
}

// Grouped status names everything not computed: an invalid group and a tile total past what one
// launch walks -- nothing computed, and the invalid group named beside it (before, only the
// invalid group was named, though the valid ones were skipped too); and more invalid groups than
// the block lists -- the first twelve named in index order, the rest counted, the valid ones
// computed.
TEST_F(ReliabilityGpu, GroupedStatusNamesEverythingNotComputed) {
  P p;
  ASSERT_NO_FATAL_FAILURE(p.make(lowbit_test::seed()));
  const size_t ws_bytes = fp8_grouped_workspace_size(64);
  Buf ws(ws_bytes), desc(64 * sizeof(Fp8GroupedProblem)), out(P::M * P::N * 2);
  Slot s;
  s.out = out.p;
  auto g = fp8_groups(p, s);
  // Huge valid groups (never read: nothing is computed) plus an invalid one.
  std::vector<Fp8GroupedProblem> big = g;
  big[0].m = 1 << 30;
  big[0].n = 1 << 30;
  big[0].sfa_ld = 1 << 30;
  big[1].m = -3;
  CUDA_OK(cudaMemcpy(desc.p, big.data(), big.size() * sizeof(big[0]), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(out.p, 0xFF, out.bytes));
  ASSERT_TRUE(fp8_grouped_gemm(static_cast<const Fp8GroupedProblem*>(desc.p), 3, OutType::kBF16, ws.p, ws_bytes,
                               nullptr).ok());
  Status st = fp8_grouped_check_status(ws.p, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("nothing was computed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("2^30 tiles"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("group 1: m < 0"), std::string::npos) << st.message();
  std::vector<uint8_t> h(out.bytes);
  CUDA_OK(cudaMemcpy(h.data(), out.p, h.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(poisoned(h), h.size() / 2) << "nothing may be written";
  // 45 groups, 14 of them invalid: 12 named, 2 counted; the valid ones computed.
  std::vector<Fp8GroupedProblem> many;
  std::vector<int> invalid;
  for (int i = 0; i < 45; ++i) {
    Fp8GroupedProblem q = g[0];
    q.m = 4;
    q.a = static_cast<const uint8_t*>(p.a8) + 4 * i * P::K % (P::M * P::K - 4 * P::K);
    q.d = static_cast<uint8_t*>(out.p) + (i % 25) * 4 * P::N * 2;
    if (i % 3 == 1 && invalid.size() < 14) {
      q.n = 24;  // not a multiple of 16
      invalid.push_back(i);
    }
    many.push_back(q);
  }
  for (int i = 25; i < 45; ++i)
    if (many[i].n != 24) many[i].m = 0;  // rows 100.. do not exist: the later valid groups stay empty
  CUDA_OK(cudaMemcpy(desc.p, many.data(), many.size() * sizeof(many[0]), cudaMemcpyHostToDevice));
  ASSERT_EQ(invalid.size(), 14u);
  ASSERT_TRUE(fp8_grouped_gemm(static_cast<const Fp8GroupedProblem*>(desc.p), 45, OutType::kBF16, ws.p, ws_bytes,
                               nullptr).ok());
  st = fp8_grouped_check_status(ws.p, nullptr);
  EXPECT_EQ(st.message().find("nothing was computed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("14 invalid groups"), std::string::npos) << st.message();
  for (int i = 0; i < 12; ++i)
    EXPECT_NE(st.message().find("group " + std::to_string(invalid[i]) + ":"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("group " + std::to_string(invalid[12]) + ":"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("and 2 more"), std::string::npos) << st.message();
  // NVFP4: a group with a bad global scale and a staging capacity too small for the call.
  Nvfp4GroupedArgs a;
  Buf nvws(nvfp4_grouped_workspace_size(3, 64)), nvdesc(3 * sizeof(Nvfp4GroupedProblem));
  auto ng = nvfp4_groups(p, s);
  for (auto& q : ng) {
    q.a = p.act_fp4;
    q.a_scales = p.act_fp4_scales;
  }
  ng[2].b_global_scale = 0.0f;
  CUDA_OK(cudaMemcpy(nvdesc.p, ng.data(), ng.size() * sizeof(ng[0]), cudaMemcpyHostToDevice));
  a.problems = static_cast<const Nvfp4GroupedProblem*>(nvdesc.p);
  a.groups = 3;
  a.nvfp4_activations = true;
  a.max_activation_elements = 64;  // group 0 alone needs 7 x 1024
  a.workspace = nvws.p;
  a.workspace_bytes = nvws.bytes;
  ASSERT_TRUE(nvfp4_grouped_gemm(a, nullptr).ok());
  st = nvfp4_grouped_check_status(nvws.p, nullptr);
  EXPECT_NE(st.message().find("nothing was computed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("max_activation_elements"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("group 2: global scales"), std::string::npos) << st.message();
  CUDA_OK(cudaGetLastError());
}

// Refused calls leave nothing behind: after each, the caller's cudaGetLastError is clean and the
// next valid call works (workspace_init on a host pointer used to leave cudaErrorInvalidValue
// pending for the caller's next CUDA call).
TEST_F(ReliabilityGpu, RefusedCallsLeaveNoPendingError) {
  std::vector<uint8_t> host(8192);
  EXPECT_FALSE(workspace_init(host.data(), host.size(), nullptr).ok());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Buf ws(4096);
  EXPECT_TRUE(workspace_init(ws.p, 4096, nullptr).ok());
  // Refused for a rule (no CUDA call made) and for a pointer kind (one made): both clean.
  Fp8GemmArgs a;
  a.m = 64;
  a.n = 64;
  a.k = 64;
  a.a = ws.p;
  a.b = ws.p;
  a.d = host.data() + (16 - reinterpret_cast<uintptr_t>(host.data()) % 16) % 16;
  EXPECT_EQ(fp8_gemm(a, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  a.alpha = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fp8_gemm(a, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The pointer-kind check (common/arg_check.h) on every kind of memory: what a kernel can read is
// accepted (device memory, a pointer into it, managed memory, pinned and registered host memory),
// what it cannot is refused (pageable host memory where the device does not read it, a freed
// allocation), and no error is left pending either way.
TEST_F(ReliabilityGpu, PointerKindsAcceptedAndRefused) {
  auto check = [](const void* ptr) { return check::ArgCheck("kinds").ptr("x", ptr, 16).device(); };
  Buf dev_mem(1 << 16);
  EXPECT_TRUE(check(dev_mem.p).ok()) << check(dev_mem.p).to_string();
  EXPECT_TRUE(check(static_cast<char*>(dev_mem.p) + 4096).ok());
  void* managed = nullptr;
  CUDA_OK(cudaMallocManaged(&managed, 1 << 16));
  EXPECT_TRUE(check(managed).ok()) << check(managed).to_string();
  CUDA_OK(cudaFree(managed));
  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 1 << 16));
  EXPECT_TRUE(check(pinned).ok()) << check(pinned).to_string();
  CUDA_OK(cudaFreeHost(pinned));
  std::vector<uint8_t> host(1 << 16);
  void* aligned = host.data() + (4096 - reinterpret_cast<uintptr_t>(host.data()) % 4096) % 4096;
  CUDA_OK(cudaHostRegister(aligned, 1 << 14, cudaHostRegisterDefault));
  EXPECT_TRUE(check(aligned).ok()) << check(aligned).to_string();
  CUDA_OK(cudaHostUnregister(aligned));
  int device = 0, pageable = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device));
  EXPECT_EQ(check(aligned).ok(), pageable != 0) << check(aligned).to_string();
  void* freed = nullptr;
  CUDA_OK(cudaMalloc(&freed, 1 << 16));
  CUDA_OK(cudaFree(freed));
  const Status st = check(freed);
  EXPECT_EQ(st.ok(), pageable != 0) << st.to_string();
  if (!pageable) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("not memory the device can read"), std::string::npos) << st.message();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A stream of another context than the calling thread's current one -- another device's, or a
// second context on this device -- is refused with an error and nothing runs: lowbit launches
// through the driver on kernel handles, which would run the kernel in the stream's context, on
// pointers and sizes checked for this one (hopper/launch.cpp). The current context stays usable.
TEST_F(ReliabilityGpu, StreamOfAnotherContextIsRefused) {
  const auto create = driver_entry<PFN_cuCtxCreate_v12050>("cuCtxCreate", 12050);
  const auto pop = driver_entry<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent", 4000);
  const auto push = driver_entry<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent", 4000);
  const auto current = driver_entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
  const auto destroy = driver_entry<PFN_cuCtxDestroy_v4000>("cuCtxDestroy", 4000);
  const auto stream_create = driver_entry<PFN_cuStreamCreate_v2000>("cuStreamCreate", 2000);
  const auto stream_destroy = driver_entry<PFN_cuStreamDestroy_v4000>("cuStreamDestroy", 4000);
  ASSERT_TRUE(create && pop && push && current && destroy && stream_create && stream_destroy);
  constexpr int64_t kDim = 128;
  Buf a(kDim * kDim), b(kDim * kDim), d(kDim * kDim * 2);
  CUDA_OK(cudaMemset(a.p, 0, kDim * kDim));
  CUDA_OK(cudaMemset(b.p, 0, kDim * kDim));
  CUDA_OK(cudaMemset(d.p, 0x7f, kDim * kDim * 2));
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUcontext mine = nullptr, other = nullptr, popped = nullptr;
  ASSERT_EQ(current(&mine), CUDA_SUCCESS);
  ASSERT_EQ(create(&other, nullptr, 0, device), CUDA_SUCCESS);  // pushed: current until popped
  CUstream foreign = nullptr;
  const CUresult made = stream_create(&foreign, CU_STREAM_NON_BLOCKING);
  ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
  // Whatever fails below, the other context and its stream go, and this thread's context stays.
  struct Cleanup {
    decltype(push) push_;
    decltype(pop) pop_;
    decltype(destroy) destroy_;
    decltype(stream_destroy) stream_destroy_;
    CUcontext ctx;
    CUstream stream;
    ~Cleanup() {
      CUcontext top = nullptr;
      if (stream && push_(ctx) == CUDA_SUCCESS) {
        stream_destroy_(stream);
        pop_(&top);
      }
      destroy_(ctx);
    }
  } cleanup{push, pop, destroy, stream_destroy, other, made == CUDA_SUCCESS ? foreign : nullptr};
  ASSERT_EQ(made, CUDA_SUCCESS);
  ASSERT_EQ(popped, other);
  CUcontext now = nullptr;
  ASSERT_EQ(current(&now), CUDA_SUCCESS);
  ASSERT_EQ(now, mine);
  Fp8GemmArgs g;
  g.m = g.n = g.k = kDim;
  g.a = a.p;
  g.b = b.p;
  g.d = d.p;
  const Status st = fp8_gemm(g, reinterpret_cast<cudaStream_t>(foreign));
  EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.to_string();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> out(kDim * kDim * 2);
  CUDA_OK(cudaMemcpy(out.data(), d.p, out.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(out.begin(), out.end(), uint8_t{0x7f}), static_cast<std::ptrdiff_t>(out.size()))
      << "the refused call wrote D";
  const Status own = fp8_gemm(g, nullptr);
  EXPECT_TRUE(own.ok()) << own.to_string();
  CUDA_OK(cudaDeviceSynchronize());
}

// Every launching call can be captured, from a cold start of lowbit's caches, in the strictest
// capture mode (cudaStreamCaptureModeGlobal, PyTorch's default for torch.cuda.graph), where a
// call that could synchronize -- from any thread -- invalidates the capture. The replayed graph
// must give the eager call's result bit for bit. Both stream kinds: a blocking stream (plain
// cudaStreamCreate) also invalidates the capture if lowbit touches the legacy null stream, which a
// non-blocking one does not notice (docs/perf.md P1, "The context check under capture").
TEST_F(ReliabilityGpu, CapturedInGlobalModeEveryFamily) {
  P p;
  ASSERT_NO_FATAL_FAILURE(p.make(lowbit_test::seed()));
  const std::vector<Family> fams = families();
  for (const unsigned flags : {cudaStreamDefault, cudaStreamNonBlocking}) {
    SCOPED_TRACE(flags == cudaStreamDefault ? "blocking stream" : "non-blocking stream");
    Slots graph_slots, eager_slots;  // poisoned afresh for each stream kind
    ASSERT_NO_FATAL_FAILURE(graph_slots.make(p, fams));
    ASSERT_NO_FATAL_FAILURE(eager_slots.make(p, fams));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&s, flags));
    CUDA_OK(cudaDeviceSynchronize());
    for (size_t fi = 0; fi < fams.size(); ++fi) {
      SCOPED_TRACE(fams[fi].name);
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      const Status st = fams[fi].run(p, graph_slots.slots[fi], s);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s, &graph);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(end, cudaSuccess) << "the call invalidated a global-mode capture: " << cudaGetErrorString(end);
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      ASSERT_TRUE(fams[fi].run(p, eager_slots.slots[fi], s).ok());
      CUDA_OK(cudaStreamSynchronize(s));
      const auto got = download(graph_slots.slots[fi]);
      const auto want = download(eager_slots.slots[fi]);
      EXPECT_EQ(poisoned(want), 0u);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "the replay differs from the eager call";
    }
    CUDA_OK(cudaGetLastError());
    cudaStreamDestroy(s);
  }
}
