// lmcore/core/internal/simd_dispatch.h — LMCORE_DISPATCH(fn): Highway's HWY_DYNAMIC_DISPATCH after
// LMCORE_CPU_CAPABILITY has been applied (lmcore/core/cpu_capability.h), so that the first call of
// any kernel already runs on the capped target. Every kernel file's dispatch wrappers use it.
#pragma once

#include <hwy/highway.h>

#include "lmcore/core/cpu_capability.h"

#define LMCORE_DISPATCH(fn) (::lmcore::internal::apply_cpu_capability_env(), HWY_DYNAMIC_DISPATCH(fn))
