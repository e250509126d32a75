// Compiles against the installed headers only, links the installed library, and calls it: the
// version, a size query, and a refused call (no GPU needed for either).
#include <lowbit/lowbit.h>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(lowbit::version(), "0.0.0") == 0) return 1;
  lowbit::Fp8GemmConfig c;
  c.splits = 2;
  if (lowbit::fp8_gemm_workspace_size(128, 4096, 7168, c) == 0) return 2;
  lowbit::Fp8GemmArgs a;  // M = 0: refused before anything touches a GPU
  const lowbit::Status st = lowbit::fp8_gemm(a, nullptr);
  if (st.code() != lowbit::StatusCode::kInvalidArgument) return 3;
  std::printf("lowbit %s (LOWBIT_VERSION %d): %s\n", lowbit::version(), LOWBIT_VERSION, st.to_string().c_str());
  return 0;
}
