// lmcore/core/error.h — lmcore::Error, fail() and the LMCORE_CHECK / LMCORE_ASSERT macros live in the
// base part (lmcore/base/error.h) so that the parts below core can throw them too; this header keeps
// the name every part already includes.
#pragma once

#include "lmcore/base/error.h"
