// lowbit: low-precision GEMM kernels for NVIDIA Hopper (sm_90a).
#pragma once

#include "lowbit/device.h"
#include "lowbit/blockscaled.h"
#include "lowbit/gemm.h"
#include "lowbit/moe.h"
#include "lowbit/nvfp4.h"
#include "lowbit/patch_embed.h"
#include "lowbit/quantize.h"
#include "lowbit/sparse.h"
#include "lowbit/status.h"
#include "lowbit/version.h"
