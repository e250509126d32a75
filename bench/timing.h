// Kernel timing for the bench: a CUDA graph of `batch` back-to-back launches (so host dispatch
// stays out of kernel time), warmed up, then replayed `samples` times between CUDA events.
// The per-launch time of each replay is graph time / batch; the median of those is reported.
// Each timed replay follows an untimed replay of the same graph, so the graph's submission
// happens while the GPU is busy (at the same load) and stays out of the measured interval.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "lowbit/status.h"

namespace lowbit::bench {

struct Timing {
  double median_us = 0.0;
  double min_us = 0.0;
  double max_us = 0.0;
  int batch = 0;
  int samples = 0;
};

// `launch(stream, i)` enqueues launch number i (callers rotate input sets with it).
using LaunchFn = std::function<Status(cudaStream_t, int)>;

// Times several launchers (lowbit and its baselines) with their replays interleaved sample by
// sample, so clock and temperature drift during the run hit all of them alike.
Status time_graphs_interleaved(const std::vector<LaunchFn>& launches, cudaStream_t stream, int batch, int samples,
                               std::vector<Timing>* out);

// A rough per-launch time (a few launches between events) to size the batch.
Status rough_time_us(const LaunchFn& launch, cudaStream_t stream, double* us);

}  // namespace lowbit::bench
