// lowbit-bench: times lowbit kernels against same-process baselines on the same inputs.
//   lowbit-bench [--suite default|W1-square|W1-llm|W2|W3|W3-fp8|W3-f16|W4|W5|W6|W7-fp8|W7-held|BS-grouped|BS-dense] [--shape MxNxK ...] [--config bn=128,splits=2]
//                [--out bf16|fp16|fp32] [--bias] [--rowwise] [--samples N] [--seed N] [--json FILE] [--explain]
//                [--no-baseline] [--list] [--alt CONFIG]...  (alternates timed interleaved with the rest)
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "lowbit/device.h"

using namespace lowbit;
using namespace lowbit::bench;

namespace {

std::vector<Shape> suite_shapes(const std::string& suite) {
  std::vector<Shape> v;
  if (suite == "W1-square" || suite == "default") {
    v.push_back({"W1-square", 4096, 8192, 8192});
    v.push_back({"W1-square", 8192, 8192, 8192});
  }
  if (suite == "W2" || suite == "default") {
    // ViT-B/16 at 224 px (P = 196) for 4736 images, the same at 1/8 the rows, and ViT-L/14 at
    // 336 px (P = 576) for 1611 images: [M, 768] x [768, 768]^T + bias + pos.
    v.push_back({"W2", 928256, 768, 768, 196});
    v.push_back({"W2", 116032, 768, 768, 196});
    v.push_back({"W2", 927936, 768, 768, 576});
  }
  if (suite == "W4" || suite == "default") {
    // Seed 004's decode shapes at M = 128, then M from 1 to 4096 at (7168, 16384).
    const int64_t nk[][2] = {{7168, 16384}, {4096, 7168}, {7168, 2048}};
    for (const auto& p : nk) v.push_back({"W4", 128, p[0], p[1]});
    for (int64_t m : {1, 16, 512, 4096}) v.push_back({"W4", m, 7168, 16384});
  }
  if (suite == "W5" || suite == "default") {
    // Seed 001's grouped NVFP4 sets (workloads.md W5): per-group M, shared N and K.
    v.push_back({"W5", 0, 4096, 7168, 0, {80, 176, 128, 72, 64, 248, 96, 160}});
    v.push_back({"W5", 0, 7168, 2048, 0, {40, 76, 168, 72, 164, 148, 196, 160}});
    v.push_back({"W5", 0, 3072, 4096, 0, {192, 320}});
    v.push_back({"W5", 0, 4096, 1536, 0, {128, 384}});
  }
  if (suite == "BS-grouped" || suite == "default") {
    // Block-scaled FP8 grouped GEMM: DeepGEMM's contiguous (G=4 x 8192 x 4096 x 7168, G=8 x 4096 x
    // 7168 x 2048) and masked (G=4 x 256 x 7168 x 2048, G=256 x 4 x 512 x 2048) tables; each also
    // timed through the masked layout.
    v.push_back({"BS-grouped", 8192, 4096, 7168, 0, {8192, 8192, 8192, 8192}});
    v.push_back({"BS-grouped", 4096, 7168, 2048, 0, {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}});
    v.push_back({"BS-grouped", 256, 7168, 2048, 0, {256, 256, 256, 256}});
    // DeepGEMM's other two contiguous cases, MoE-sized: 256 and 64 experts of 256 rows each.
    v.push_back({"BS-grouped", 256, 512, 2048, 0, std::vector<int64_t>(256, 256)});
    v.push_back({"BS-grouped", 256, 2048, 7168, 0, std::vector<int64_t>(64, 256)});
    // DeepGEMM's decode table: 256 experts with 4 tokens each.
    v.push_back({"BS-grouped", 4, 512, 2048, 0, std::vector<int64_t>(256, 4)});
  }
  if (suite == "BS-dense") {
    v.push_back({"BS-dense", 4096, 8192, 8192});
    v.push_back({"BS-dense", 128, 7168, 2048});
    v.push_back({"BS-dense", 4096, 7168, 2048});
  }
  if (suite == "W6" || suite == "default") {
    // Fused MoE: the seed's shape (M = 128, E = 256, top-8, N = 512, K = 2048) swept over M, and
    // a second model shape (E = 128, N = 768).
    for (int64_t m : {1, 16, 64, 128, 512, 2048, 8192}) {
      Shape sh{"W6", m, 512, 2048};
      sh.experts = 256;
      sh.top_k = 8;
      v.push_back(sh);
    }
    Shape second{"W6", 128, 768, 2048};
    second.experts = 128;
    second.top_k = 8;
    v.push_back(second);
  }
  for (const char* w3 : {"W3-fp8", "W3-f16"}) {
    if (suite != w3 && suite != "W3" && suite != "default") continue;
    // 2:4 sparse A: the square shapes, and sparse weights W[O=7168, K=2048] times activations
    // X[T, K] for T = 128 and 4096 (the product computed as W . X^T: M = O, N = T).
    v.push_back({w3, 4096, 8192, 8192});
    v.push_back({w3, 8192, 8192, 8192});
    v.push_back({w3, 7168, 128, 2048});
    v.push_back({w3, 7168, 4096, 2048});
  }
  if (suite == "W1-llm" || suite == "default") {
    const int64_t ms[] = {64, 128, 4096};
    const int64_t nk[][2] = {{2112, 7168}, {4096, 7168}, {7168, 16384}, {7168, 2048}, {24576, 1536}, {32768, 512}};
    for (int64_t m : ms)
      for (const auto& p : nk) v.push_back({"W1-llm", m, p[0], p[1]});
  }
  // W7, the models suite (shared/workloads.md), on the dense FP8 GEMM (per-tensor, or --rowwise):
  // the q/k/v, o, gate/up and down projections of Llama-3.1-8B, Llama-3.1-70B and Qwen2.5-72B
  // (which shares the 70B's attention shapes) and DeepSeek-V3's six dense pairs, at every batch an
  // engine sees. W7-held: models in no suite, never tuned on, reported apart (Qwen2.5-7B,
  // Qwen2.5-14B, Gemma-2-9B).
  if (suite == "W7-fp8" || suite == "W7-held") {
    const int64_t ms[] = {1, 16, 64, 256, 1024, 4096};
    const std::vector<std::array<int64_t, 2>> models = {
        {6144, 4096},  {4096, 4096},  {28672, 4096}, {4096, 14336},                 // Llama-3.1-8B
        {10240, 8192}, {8192, 8192},  {57344, 8192}, {8192, 28672},                 // Llama-3.1-70B
        {59136, 8192}, {8192, 29568},                                               // Qwen2.5-72B's MLP
        {2112, 7168},  {24576, 1536}, {32768, 512},  {7168, 16384}, {4096, 7168}, {7168, 2048}};  // DeepSeek-V3
    const std::vector<std::array<int64_t, 2>> held = {
        {4608, 3584}, {3584, 3584}, {37888, 3584}, {3584, 18944},  // Qwen2.5-7B
        {7168, 5120}, {5120, 5120}, {27648, 5120}, {5120, 13824},  // Qwen2.5-14B
        {8192, 3584}, {3584, 4096}, {28672, 3584}, {3584, 14336}};  // Gemma-2-9B
    for (int64_t m : ms)
      for (const auto& p : suite == "W7-fp8" ? models : held) v.push_back({suite, m, p[0], p[1]});
  }
  return v;
}

bool parse_shape(const std::string& s, Shape* out) {
  long long m, n, k;
  int experts = 0, top_k = 0;
  // "MxNxK/E/topk": one W6 (MoE) shape.
  if (std::sscanf(s.c_str(), "%lldx%lldx%lld/%d/%d", &m, &n, &k, &experts, &top_k) == 5) {
    *out = {"W6", m, n, k};
    out->experts = experts;
    out->top_k = top_k;
    return true;
  }
  // "GxMxNxK": a block-scaled grouped shape, G groups of M rows (BS-grouped's layouts).
  long long g;
  char tail;
  if (std::sscanf(s.c_str(), "%lldx%lldx%lldx%lld%c", &g, &m, &n, &k, &tail) == 4) {
    if (g < 1 || g > 4096 || m < 1) return false;
    *out = {"BS-grouped", m, n, k, 0, std::vector<int64_t>(static_cast<size_t>(g), m)};
    return true;
  }
  if (std::sscanf(s.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3) return false;
  *out = {"custom", m, n, k};
  return true;
}

// What a suite's "x base" divides by (shared/workloads.md names each suite's baseline).
// Custom shapes run the 2:4 GEMM with --sparse, else the dense FP8 GEMM; with --fast-accum the
// E4M3 sparse rows divide by cuBLASLt with fast accumulation.
const char* baseline_name(const std::string& suite, const Options& opt) {
  if (suite == "W2") return "cuBLASLt GEMM+bias";
  if (suite == "W4") return "cuBLASLt FP8";
  if (suite == "W5") return "per-group loop";
  if (suite == "W6") return "unfused pipeline";
  if (suite.rfind("BS-", 0) == 0) return "cuBLASLt block-scaled";
  const bool sparse = suite.rfind("W3", 0) == 0 || (suite == "custom" && !opt.sparse.empty());
  if (suite == "W3-f16" || (suite == "custom" && opt.sparse == "f16")) return "dense cuBLAS FP16";
  if (sparse) return opt.fast_accum ? "dense cuBLASLt FP8, fast accumulation" : "dense cuBLASLt FP8";
  return opt.rowwise ? "cuBLASLt FP8 rowwise" : "cuBLASLt FP8";
}

// The shapes main hands to run_fp8_shape, the dense FP8 GEMM: the only kernel here with FP16
// output and per-row scales.
bool dense_fp8(const Shape& sh, const Options& opt) {
  return sh.suite == "W1-square" || sh.suite == "W1-llm" || sh.suite == "W7-fp8" || sh.suite == "W7-held" ||
         (sh.suite == "custom" && opt.sparse.empty());
}

const char* out_name(OutType t) { return t == OutType::kFP32 ? "fp32" : t == OutType::kFP16 ? "fp16" : "bf16"; }

void usage() {
  std::printf(
      "lowbit-bench [--suite default|W1-square|W1-llm|W2|W3|W3-fp8|W3-f16|W4|W5|W6|W7-fp8|W7-held|BS-grouped|BS-dense] [--shape MxNxK[/experts/topk] | GxMxNxK (grouped)]... [--config bn=128,splits=1,group=8,grid=0]\n"
      "             [--out bf16|fp16|fp32 (fp16: W1, W7 and custom dense shapes)] [--bias] [--samples N>=50] [--seed N]\n"
      "             [--rowwise (W1, W7 and custom dense shapes: random per-token x per-channel scales, against cuBLASLt's\n"
      "              outer-vector scaling, as torch._scaled_mm's rowwise)] [--json FILE] [--explain]\n"
      "             [--no-baseline] [--list] [--alt CONFIG (not W6)]... [--sparse e4m3|f16 (custom shapes: the 2:4 GEMM)]\n"
      "             [--fast-accum (W3 E4M3: the reported and --alt configs accumulate in the tensor cores)]\n"
      "             [--host-overhead (host us per eager call at the first --shape, default 1x4096x4096)]\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  opt.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000003;
  bool list = false;
  bool host_overhead = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--suite") opt.suite = next("--suite");
    else if (a == "--shape") opt.shapes.push_back(next("--shape"));
    else if (a == "--config") opt.config = next("--config");
    else if (a == "--alt") opt.alt_configs.push_back(next("--alt"));
    else if (a == "--out") {
      const std::string o = next("--out");
      if (o == "fp32") opt.out = OutType::kFP32;
      else if (o == "bf16") opt.out = OutType::kBF16;
      else if (o == "fp16") opt.out = OutType::kFP16;
      else { std::fprintf(stderr, "--out takes bf16, fp16 or fp32\n"); return 2; }
    } else if (a == "--bias") opt.bias = true;
    else if (a == "--rowwise") opt.rowwise = true;
    else if (a == "--samples") opt.samples = std::atoi(next("--samples").c_str());
    else if (a == "--seed") opt.seed = std::strtoull(next("--seed").c_str(), nullptr, 10);
    else if (a == "--json") opt.json = next("--json");
    else if (a == "--explain") opt.explain = true;
    else if (a == "--no-baseline") opt.baseline = false;
    else if (a == "--fast-accum") opt.fast_accum = true;
    else if (a == "--list") list = true;
    else if (a == "--host-overhead") host_overhead = true;
    else if (a == "--sparse") {
      opt.sparse = next("--sparse");
      if (opt.sparse != "e4m3" && opt.sparse != "f16") { std::fprintf(stderr, "--sparse takes e4m3 or f16\n"); return 2; }
    }
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); usage(); return 2; }
  }
  if (opt.samples < 50) {
    std::fprintf(stderr, "--samples must be >= 50 (got %d)\n", opt.samples);
    return 2;
  }

  if (host_overhead) {
    // The first --shape (default 1 x 4096 x 4096, issue 38's decode layer), eager calls.
    Shape sh{"custom", 1, 4096, 4096};
    if (!opt.shapes.empty() && (!parse_shape(opt.shapes[0], &sh) || sh.suite != "custom")) {
      std::fprintf(stderr, "bad --shape %s (want MxNxK)\n", opt.shapes[0].c_str());
      return 2;
    }
    return run_host_overhead(sh.m, sh.n, sh.k, 3.0);
  }

  std::vector<Shape> shapes;
  for (const auto& s : opt.shapes) {
    Shape sh;
    if (!parse_shape(s, &sh)) { std::fprintf(stderr, "bad --shape %s (want MxNxK, MxNxK/experts/topk or GxMxNxK)\n", s.c_str()); return 2; }
    // "--suite W4 --shape MxNxK" runs that suite's kernel on the shape (default: the FP8 GEMM).
    for (const char* own : {"W1-square", "W1-llm", "W3-fp8", "W3-f16", "W4", "BS-dense"})
      if (sh.suite == "custom" && opt.suite == own) sh.suite = own;
    // The suites whose shapes are more than M x N x K (a period, groups, experts) take none here:
    // the shape would silently run the dense FP8 GEMM under the suite's name.
    if (sh.suite == "custom" && opt.suite != "default") {
      bool known = false;
      for (const char* own : {"W1-square", "W1-llm", "W3-fp8", "W3-f16", "W4", "BS-dense"}) known |= opt.suite == own;
      if (!known) {
        std::fprintf(stderr,
                     "--suite %s does not take --shape MxNxK (that would run the dense FP8 GEMM); drop --suite "
                     "(an MoE shape is MxNxK/experts/topk, no --suite needed)\n",
                     opt.suite.c_str());
        return 2;
      }
    }
    shapes.push_back(sh);
  }
  if (opt.shapes.empty()) shapes = suite_shapes(opt.suite);
  if (shapes.empty()) { std::fprintf(stderr, "unknown suite %s\n", opt.suite.c_str()); return 2; }
  // Refused rather than run without: the other kernels would time something else under the flag
  // (or fail every row).
  if (opt.rowwise || opt.out == OutType::kFP16) {
    for (const auto& sh : shapes) {
      if (dense_fp8(sh, opt)) continue;
      std::fprintf(stderr,
                   "--rowwise and --out fp16 apply to the dense FP8 GEMM only (--suite W1-square, W1-llm, W7-fp8 or "
                   "W7-held, or --shape MxNxK), not to %s %lldx%lldx%lld\n",
                   sh.suite.c_str(), (long long)sh.m, (long long)sh.n, (long long)sh.k);
      return 2;
    }
  }
  if (list) {
    for (const auto& s : shapes) std::printf("%s %lldx%lldx%lld\n", s.suite.c_str(), (long long)s.m, (long long)s.n, (long long)s.k);
    return 0;
  }

  DeviceInfo dev;
  const Status hs = require_hopper(&dev);
  if (!hs.ok()) {
    std::fprintf(stderr, "lowbit-bench: cannot benchmark here: %s\n", hs.to_string().c_str());
    std::fprintf(stderr, "lowbit-bench needs an NVIDIA Hopper (sm_90) GPU; nothing was measured.\n");
    return 1;
  }
  std::printf("lowbit-bench on %s (%d SMs, L2 %zu MB, %zu KB smem/block), seed %llu, out %s%s%s\n", dev.name.c_str(),
              dev.sm_count, dev.l2_bytes >> 20, dev.smem_per_block_optin >> 10, (unsigned long long)opt.seed,
              out_name(opt.out), opt.bias ? ", +bias" : "", opt.rowwise ? ", rowwise scales" : "");
  std::printf("floors: max(FLOPs / %.0f TFLOPS, bytes / %.1f TB/s); times are medians of %d graph replays\n",
              kPeakFp8Tflops, kCopyTBs, opt.samples);

  std::vector<Result> results;
  // Rewritten after every shape, so a run cut short (a timeout, a crash) keeps what it measured.
  auto write_json = [&]() {
    if (opt.json.empty()) return;
    std::ofstream f(opt.json);
    f << "{\"device\":\"" << dev.name << "\",\"sms\":" << dev.sm_count << ",\"seed\":" << opt.seed << ",\"out\":\""
      << out_name(opt.out) << "\",\"rowwise\":" << (opt.rowwise ? "true" : "false") << ",\"results\":[";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      f << (i ? "," : "") << "{\"suite\":\"" << r.shape.suite << "\",\"m\":" << r.shape.m << ",\"n\":" << r.shape.n
        << ",\"k\":" << r.shape.k << ",\"baseline\":\"" << baseline_name(r.shape.suite, opt) << "\",\"us\":" << r.us
        << ",\"us_base\":" << r.us_base << ",\"tflops\":" << r.tflops
        << ",\"gbs\":" << r.gbs << ",\"floor_us\":" << r.floor_us << ",\"pct_floor\":" << r.pct_floor
        << ",\"x_base\":" << r.speedup << ",\"err\":" << r.err << ",\"err_base\":" << r.err_base
        << ",\"period\":" << r.shape.period << ",\"us_unfused\":" << r.us_unfused << ",\"x_unfused\":" << r.x_unfused
        << ",\"err_unfused\":" << r.err_unfused << ",\"us_bf16\":" << r.us_bf16 << ",\"us_w4a16\":" << r.us_w4a16
        << ",\"us_fp8_ours\":" << r.us_fp8_ours << ",\"us_cusparselt\":" << r.us_cusparselt
        << ",\"err_cusparselt\":" << r.err_cusparselt << ",\"us_fast_accum\":" << r.us_fast
        << ",\"us_base_fast_accum\":" << r.us_base_fast << ",\"err_base_fast_accum\":" << r.err_base_fast
        << ",\"err_fast_accum\":" << r.err_fast << ",\"config_fast_accum\":\"" << r.config_fast << "\"" << ",\"compute_floor_us\":" << r.compute_floor_us
        << ",\"groups\":" << (r.shape.group_m.empty() ? 1 : r.shape.group_m.size()) << ",\"us_loop\":" << r.us_loop << ",\"us_masked\":" << r.us_masked << ",\"us_contiguous\":" << r.us_contiguous
        << ",\"x_loop\":" << r.x_loop << ",\"similarity_diff\":" << r.similarity << ",\"experts\":" << r.shape.experts
        << ",\"top_k\":" << r.shape.top_k << ",\"us_det\":" << r.us_det << ",\"us_pdl_first\":" << r.us_pdl_first << ",\"stages\":{";
      for (size_t j = 0; j < r.stages.size(); ++j) f << (j ? "," : "") << "\"" << r.stages[j].first << "\":" << r.stages[j].second;
      f << "}"
        << ",\"batch\":" << r.batch << ",\"samples\":" << r.samples << ",\"config\":\"" << r.config
        << "\",\"status\":\"" << r.status << "\"}";
    }
    f << "]}\n";
  };
  bool any_fail = false;
  for (const auto& sh : shapes) {
    Result r;
    const Status st = sh.suite == "W2"                ? run_patch_embed_shape(opt, sh, &r)
                      : sh.suite == "W4"              ? run_nvfp4_shape(opt, sh, &r)
                      : sh.suite == "W5"              ? run_nvfp4_grouped_shape(opt, sh, &r)
                      : sh.suite.rfind("BS-", 0) == 0 ? run_blockscaled_shape(opt, sh, &r)
                      : sh.suite == "W6"              ? run_moe_shape(opt, sh, &r)
                      : sh.suite.rfind("W3", 0) == 0 || (sh.suite == "custom" && !opt.sparse.empty())
                          ? run_sparse_shape(opt, sh, &r)
                                                      : run_fp8_shape(opt, sh, &r);
    if (!st.ok()) {
      r.shape = sh;
      r.status = "ERROR: " + st.to_string();
    }
    if (!row_passed(r)) any_fail = true;
    results.push_back(r);
    write_json();
    std::fflush(stdout);
  }

  std::printf("\n%-9s %5s %6s %6s | %9s %8s %8s %7s | %9s %7s | %8s %8s | %s\n", "suite", "M", "N", "K", "us", "TFLOPS",
              "GB/s", "%floor", "baseline", "x base", "err", "err_base", "config / status");
  std::string last_suite;
  double log_sum = 0.0;
  int log_n = 0, log_excluded = 0;
  auto flush_geomean = [&](const std::string& suite) {
    if (log_n > 0)
      std::printf("%-9s geomean x %s over %d shapes: %.3f%s\n", suite.c_str(), baseline_name(suite, opt), log_n,
                  std::exp(log_sum / log_n),
                  log_excluded ? (" (" + std::to_string(log_excluded) + " failed rows left out)").c_str() : "");
    log_sum = 0.0;
    log_n = log_excluded = 0;
  };
  for (const auto& r : results) {
    if (r.shape.suite != last_suite) {
      flush_geomean(last_suite);
      last_suite = r.shape.suite;
    }
    // A row that failed a check stays out of the geomean, however fast it ran.
    if (row_passed(r) && r.speedup > 0) {
      log_sum += std::log(r.speedup);
      ++log_n;
    } else if (!row_passed(r)) {
      ++log_excluded;  // failed a check or errored out (no time at all)
    }
    if (r.status.rfind("ERROR", 0) == 0) {
      std::printf("%-9s %5lld %6lld %6lld | %s\n", r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n,
                  (long long)r.shape.k, r.status.c_str());
      continue;
    }
    if (r.shape.suite == "W2") {
      std::printf("%-9s %6lld %4lld %4lld P=%-4lld | %9.1f %8.1f %8.0f %6.1f%% | %9.1f %7.3f | unfused %9.1f us %7.3f x"
                  " | %8.2e unfused %8.2e | %s %s\n",
                  r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k,
                  (long long)r.shape.period, r.us, r.tflops, r.gbs, r.pct_floor, r.us_base, r.speedup, r.us_unfused,
                  r.x_unfused, r.err, r.err_unfused, r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      continue;
    }
    if (r.shape.suite.rfind("BS-", 0) == 0) {
      const int groups = r.shape.group_m.empty() ? 1 : static_cast<int>(r.shape.group_m.size());
      std::printf("%-9s %2dx%5lld %6lld %6lld | %9.1f %8.1f %8.0f %6.1f%% | %9.1f %7.3f | per-group loop %9.1f us %6.3f x"
                  " | %8.2e sim %8.2e | %s %s\n",
                  r.shape.suite.c_str(), groups, (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k, r.us,
                  r.tflops, r.gbs, r.pct_floor, r.us_base, r.speedup, r.us_loop, r.x_loop, r.err, r.similarity,
                  r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      continue;
    }
    if (r.shape.suite == "W5") {
      int64_t total_m = 0;
      for (int64_t m : r.shape.group_m) total_m += m;
      std::printf("%-9s %2zux%4lld %6lld %6lld | %9.2f %8.1f %8.0f %6.1f%% | per-group loop %9.2f %6.3f x | w4a16 %8.2f"
                  " | pdl-first %8.2f %6.3f x | bf16-mma floor %6.2f | %8.2e | %s %s\n",
                  r.shape.suite.c_str(), r.shape.group_m.size(), (long long)(total_m / std::max<size_t>(1, r.shape.group_m.size())),
                  (long long)r.shape.n, (long long)r.shape.k, r.us, r.tflops, r.gbs, r.pct_floor, r.us_loop, r.x_loop,
                  r.us_w4a16, r.us_pdl_first, r.us_pdl_first > 0 && r.us_loop > 0 ? r.us_loop / r.us_pdl_first : 0.0,
                  r.compute_floor_us, r.err, r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      continue;
    }
    if (r.shape.suite == "W6") {
      std::string stages;
      for (const auto& st : r.stages) stages += st.first + " " + std::to_string(st.second).substr(0, 5) + " ";
      std::printf("%-9s %5lld %6lld %6lld | %9.2f %8.1f %8.0f %6.1f%% | %9.2f %7.3f | E=%d top%d det %8.2f | pdl-first %8.2f"
                  " %6.3f x | %s| %8.2e sim %8.2e | %s %s\n",
                  r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k, r.us,
                  r.tflops, r.gbs, r.pct_floor, r.us_base, r.speedup, r.shape.experts, r.shape.top_k, r.us_det,
                  r.us_pdl_first, r.us_pdl_first > 0 && r.us_base > 0 ? r.us_base / r.us_pdl_first : 0.0, stages.c_str(), r.err,
                  r.similarity, r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      continue;
    }
    if (r.shape.suite.rfind("W3", 0) == 0) {
      std::printf("%-9s %5lld %6lld %6lld | %9.1f %8.1f %8.0f %6.1f%% | %9.1f %7.3f | dense(ours) %8.1f | "
                  "cuSPARSELt %8.1f %6.3f x | %8.2e %8.2e %8.2e | %s %s\n",
                  r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k, r.us,
                  r.tflops, r.gbs, r.pct_floor, r.us_base, r.speedup, r.us_fp8_ours, r.us_cusparselt,
                  r.us_cusparselt > 0 ? r.us_cusparselt / r.us : 0.0, r.err, r.err_base, r.err_cusparselt,
                  r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      // Fast accumulation against cuBLASLt with fast accumulation (like with like).
      if (r.us_fast > 0)
        std::printf("  fast_accum %30s | %9.1f %8.1f %17s | %9.1f %7.3f | %20s | cuSPARSELt %8s %6.3f x | %8.2e %8.2e %8s | %s\n",
                    "", r.us_fast, 2.0 * r.shape.m * r.shape.n * r.shape.k / (r.us_fast * 1e6), "", r.us_base_fast,
                    r.us_base_fast > 0 ? r.us_base_fast / r.us_fast : 0.0, "", "",
                    r.us_cusparselt > 0 ? r.us_cusparselt / r.us_fast : 0.0, r.err_fast, r.err_base_fast, "",
                    r.config_fast.c_str());
      continue;
    }
    if (r.shape.suite == "W4") {
      std::printf("%-9s %5lld %6lld %6lld | %9.2f %8.1f %8.0f %6.1f%% | %9.2f %7.3f | bf16 %8.2f %6.3f x | w4a16 %8.2f"
                  " | fp8(ours) %8.2f | bf16-mma floor %6.2f | %8.2e | %s %s\n",
                  r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k, r.us,
                  r.tflops, r.gbs, r.pct_floor, r.us_base, r.speedup, r.us_bf16, r.x_bf16, r.us_w4a16, r.us_fp8_ours,
                  r.compute_floor_us, r.err, r.config.c_str(), r.status == "ok" ? "" : r.status.c_str());
      continue;
    }
    std::printf("%-9s %5lld %6lld %6lld | %9.1f %8.1f %8.0f %6.1f%% | %9.1f %7.3f | %8.2e %8.2e | %s %s\n",
                r.shape.suite.c_str(), (long long)r.shape.m, (long long)r.shape.n, (long long)r.shape.k, r.us, r.tflops,
                r.gbs, r.pct_floor, r.us_base, r.speedup, r.err, r.err_base, r.config.c_str(),
                r.status == "ok" ? "" : r.status.c_str());
  }
  flush_geomean(last_suite);

  write_json();
  return any_fail ? 3 : 0;
}
