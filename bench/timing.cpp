#include "timing.h"

#include <algorithm>
#include <string>

namespace lowbit::bench {
namespace {

Status cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Status rough_time_us(const LaunchFn& launch, cudaStream_t stream, double* us) {
  cudaEvent_t e0, e1;
  LOWBIT_RETURN_IF_ERROR(cuda(cudaEventCreate(&e0), "event"));
  LOWBIT_RETURN_IF_ERROR(cuda(cudaEventCreate(&e1), "event"));
  const int n = 5;
  Status st = launch(stream, 0);  // warm-up: module load, attribute setup
  if (st.ok()) st = cuda(cudaEventRecord(e0, stream), "record");
  for (int i = 0; i < n && st.ok(); ++i) st = launch(stream, i);
  if (st.ok()) st = cuda(cudaEventRecord(e1, stream), "record");
  if (st.ok()) st = cuda(cudaEventSynchronize(e1), "sync");
  float ms = 0.0f;
  if (st.ok()) st = cuda(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  *us = 1000.0 * ms / n;
  return st;
}

Status time_graph(const LaunchFn& launch, cudaStream_t stream, int batch, int samples, Timing* out) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOWBIT_RETURN_IF_ERROR(cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"));
  Status st;
  for (int i = 0; i < batch && st.ok(); ++i) st = launch(stream, i);
  const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    return st;
  }
  LOWBIT_RETURN_IF_ERROR(cuda(ce, "end capture"));
  st = cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  if (!st.ok()) return st;

  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> per_launch;
  for (int w = 0; w < 3 && st.ok(); ++w) st = cuda(cudaGraphLaunch(exec, stream), "graph warm-up");
  for (int s = 0; s < samples && st.ok(); ++s) {
    st = cuda(cudaEventRecord(e0, stream), "record");
    if (st.ok()) st = cuda(cudaGraphLaunch(exec, stream), "graph launch");
    if (st.ok()) st = cuda(cudaEventRecord(e1, stream), "record");
    if (st.ok()) st = cuda(cudaEventSynchronize(e1), "sync");
    float ms = 0.0f;
    if (st.ok()) st = cuda(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    per_launch.push_back(1000.0 * ms / batch);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  if (!st.ok()) return st;
  std::sort(per_launch.begin(), per_launch.end());
  out->median_us = per_launch[per_launch.size() / 2];
  out->min_us = per_launch.front();
  out->max_us = per_launch.back();
  out->batch = batch;
  out->samples = samples;
  return Status::Ok();
}

}  // namespace lowbit::bench
