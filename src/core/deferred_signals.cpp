// DeferredSignals: see lmcore/core/deferred_signals.h for why.
#include "lmcore/core/deferred_signals.h"

#include <pthread.h>

#include <csignal>
#include <initializer_list>

namespace lmcore {

namespace {

thread_local int t_depth = 0;
thread_local sigset_t t_saved;  // the mask the outermost DeferredSignals found

}  // namespace

DeferredSignals::DeferredSignals() {
  if (t_depth++ > 0) return;
  sigset_t held;
  sigfillset(&held);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&held, fault);
  pthread_sigmask(SIG_BLOCK, &held, &t_saved);
}

DeferredSignals::~DeferredSignals() {
  if (--t_depth > 0) return;
  pthread_sigmask(SIG_SETMASK, &t_saved, nullptr);
}

bool DeferredSignals::active() { return t_depth > 0; }

}  // namespace lmcore
