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

namespace {

Status capture(const LaunchFn& launch, cudaStream_t stream, int batch, cudaGraphExec_t* exec) {
  cudaGraph_t graph = nullptr;
  LOWBIT_RETURN_IF_ERROR(cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"));
  Status st;
  for (int i = 0; i < batch && st.ok(); ++i) st = launch(stream, i);
  const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    return st;
  }
  LOWBIT_RETURN_IF_ERROR(cuda(ce, "end capture"));
  st = cuda(cudaGraphInstantiate(exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  return st;
}

}  // namespace

Status time_graphs_interleaved(const std::vector<LaunchFn>& launches, cudaStream_t stream, int batch, int samples,
                               std::vector<Timing>* out) {
  std::vector<cudaGraphExec_t> execs(launches.size(), nullptr);
  Status st;
  for (size_t i = 0; i < launches.size() && st.ok(); ++i) st = capture(launches[i], stream, batch, &execs[i]);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<std::vector<double>> per_launch(launches.size());
  for (int w = 0; w < 3 && st.ok(); ++w)
    for (auto ex : execs)
      if (st.ok()) st = cuda(cudaGraphLaunch(ex, stream), "graph warm-up");
  for (int s = 0; s < samples && st.ok(); ++s) {
    for (size_t i = 0; i < execs.size() && st.ok(); ++i) {
      // An untimed replay of the same graph first: the GPU is busy with it (at the same load, so
      // at the same clocks) while the host submits the timed one, so the submission stays out of
      // the interval. (A start event recorded on an idle GPU counted it, more for graphs of more
      // nodes; an idle spin kernel in front instead let the GPU cool between replays and ran
      // every kernel 5-10% faster than back-to-back work does: docs/perf.md, "Protocol changes".)
      st = cuda(cudaGraphLaunch(execs[i], stream), "graph launch");
      if (st.ok()) st = cuda(cudaEventRecord(e0, stream), "record");
      if (st.ok()) st = cuda(cudaGraphLaunch(execs[i], stream), "graph launch");
      if (st.ok()) st = cuda(cudaEventRecord(e1, stream), "record");
      if (st.ok()) st = cuda(cudaEventSynchronize(e1), "sync");
      float ms = 0.0f;
      if (st.ok()) st = cuda(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      per_launch[i].push_back(1000.0 * ms / batch);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (auto ex : execs)
    if (ex) cudaGraphExecDestroy(ex);
  if (!st.ok()) return st;
  out->assign(launches.size(), Timing{});
  for (size_t i = 0; i < launches.size(); ++i) {
    auto& v = per_launch[i];
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    (*out)[i].median_us = v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
    (*out)[i].min_us = v.front();
    (*out)[i].max_us = v.back();
    (*out)[i].batch = batch;
    (*out)[i].samples = samples;
  }
  return Status::Ok();
}

}  // namespace lowbit::bench
