// lmcore/core/deferred_signals.h — holding back this thread's asynchronous signals while code that
// cannot take one runs.
//
// oneDNN's jit sgemm kernels (its "gemm:jit" matmul) point the stack pointer at a heap workspace once K
// exceeds what they pack on the stack (84 with AVX-512, 252 with AVX2, in oneDNN 2.6). A signal
// delivered to the thread then has its frame, some 3 KB, pushed into the heap below that workspace:
// a trainer stopped by SIGTERM died of "corrupted size vs. prev_size" about once in 80 runs, and a
// Ctrl-C in Python would do the same. gemm_lowp.cpp runs such primitives under a DeferredSignals.
//
// While one is alive on a thread, the thread blocks every signal except those a fault raises (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT: blocking those would turn a crash into a silent
// kill). Nothing is lost: a process signal goes to another thread that takes it, or waits, and a
// thread's own arrives when the outermost DeferredSignals ends. They nest; only the outermost costs
// the two system calls (2 us together on the 2-core test VM), so a loop of many small products (the
// attention tiles) holds one around the loop instead of paying per product.
#pragma once

namespace lmcore {

class DeferredSignals {
 public:
  DeferredSignals();
  ~DeferredSignals();
  DeferredSignals(const DeferredSignals&) = delete;
  DeferredSignals& operator=(const DeferredSignals&) = delete;

  // Whether the calling thread is inside one (for tests).
  static bool active();
};

}  // namespace lmcore
