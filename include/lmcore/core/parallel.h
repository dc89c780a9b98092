// lmcore/core/parallel.h — parallel_for and the thread pool live in the base part
// (lmcore/base/parallel.h) so that parts without tensors (upgrade) can use them; this header keeps the
// name the kernels already include.
#pragma once

#include "lmcore/base/parallel.h"
