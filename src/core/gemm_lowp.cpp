// bf16/f16 GEMM: oneDNN's matmul primitive where the CPU has AVX-512 BF16 (AMX or not), else f32
// sgemm on widened copies. See lmcore/core/gemm_lowp.h for the contract.
//
// How a call runs:
//  1. Check the arguments; M or N == 0 is a no-op and K == 0 scales C by beta.
//  2. Pick the path (lowp_gemm_path) and the cut: outside a parallel_for the rows (or, for short
//     wide products, the columns) of C are split into num_threads() blocks on lmcore's pool, or for
//     a long K against few rows K is cut and the blocks' f32 partials added (run_cut); inside one
//     the whole product runs on the calling thread.
//  3. Each block runs single-threaded. oneDNN: operands whose strides are not dense are first packed
//     into per-thread buffers (oneDNN 2.6's brgemm kernels, the AMX ones included, only take dense
//     row-major or transposed matrices and would otherwise fall back to a slower non-AMX gemm), then
//     the cached primitive for the block's shape runs with a per-thread scratchpad. Widened: both
//     operands are cast to f32 (exact) and go through a single-threaded sgemm.
//
// Threads: Debian's libdnnl runs on OpenMP (libgomp). A primitive decides its thread count when it is
// created, from omp_get_max_threads() on the creating thread, and idle OpenMP workers spin for
// milliseconds after each parallel region. So every oneDNN call here runs under OmpSingleThread: the
// calling thread's OpenMP limit is 1 while oneDNN creates or executes, and restored afterwards (torch,
// in the same process through the Python module, keeps its own setting).
//
// Signals: primitives other than brgemm ("gemm:jit", taken for strided f32 operands) may run with the
// stack pointer in a heap workspace, so they run under DeferredSignals (lmcore/core/deferred_signals.h).
#include "lmcore/core/gemm_lowp.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lmcore/core/deferred_signals.h"
#include "lmcore/core/error.h"
#include "lmcore/core/low_precision.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "src/core/cast_kernels.h"

// libgomp's API, declared here rather than through <omp.h>, which clang builds may lack (the library
// is libgomp whatever the compiler: see src/core/CMakeLists.txt).
extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int);
}

namespace lmcore {

namespace {

// ---- dispatch ------------------------------------------------------------------------------------

// LMCORE_ONEDNN: unset or "1" allows oneDNN, "0" forbids it; anything else is a usage error.
bool env_allows_onednn() {
  static const bool allowed = [] {
    const char* env = std::getenv("LMCORE_ONEDNN");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "1") == 0) return true;
    if (std::strcmp(env, "0") == 0) return false;
    fail("LMCORE_ONEDNN: expected 0 or 1, found '{}'", env);
  }();
  return allowed;
}

std::atomic<bool> g_onednn_enabled{true};

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::all: return "all";
  }
  return "unknown";
}

// The ISA oneDNN dispatches to here: the CPU's, capped by ONEDNN_MAX_CPU_ISA when that is set.
dnnl::cpu_isa effective_isa() {
  static const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa;
}

// ISA values are bit sets that contain the ISAs they extend.
bool isa_includes(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(effective_isa()) & want) == want;
}

// AVX-512 BF16 is the least oneDNN needs for bf16 brgemm kernels (AMX includes it).
bool cpu_has_bf16_units() { return isa_includes(dnnl::cpu_isa::avx512_core_bf16); }

void check_ab_dtype(DType ab, const char* op) {
  LMCORE_CHECK(ab == DType::bf16 || ab == DType::f16, "{}: argument 'ab' (A and B dtype) expected bf16 or f16, found {}",
               op, ab);
}

// ---- OpenMP limit --------------------------------------------------------------------------------

// While alive, OpenMP (hence oneDNN) uses one thread on the calling thread. See the file comment.
class OmpSingleThread {
 public:
  OmpSingleThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OmpSingleThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OmpSingleThread(const OmpSingleThread&) = delete;
  OmpSingleThread& operator=(const OmpSingleThread&) = delete;

 private:
  int saved_;
};

// ---- oneDNN primitives, created once per shape ---------------------------------------------------

dnnl::engine& engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed: see cache()
  return *e;
}

dnnl::memory::data_type dnnl_type(DType dt) {
  switch (dt) {
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    case DType::f32: return dnnl::memory::data_type::f32;
    default: break;
  }
  LMCORE_ASSERT(false);
  return dnnl::memory::data_type::undef;
}

// A dense block: op(A) [m, k] and op(B) [k, n] with the transposes, C [m, n] row-major, all dense.
struct Key {
  DType ab, c;
  bool ta, tb;
  std::int64_t m, n, k;
  std::uint32_t alpha_bits, beta_bits;
  std::int64_t lda = 0, ldb = 0, ldc = 0;  // 0: dense (the stored row length)
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    std::size_t h = static_cast<std::size_t>(key.ab) * 31 + static_cast<std::size_t>(key.c);
    for (std::uint64_t v : {static_cast<std::uint64_t>(key.ta), static_cast<std::uint64_t>(key.tb),
                            static_cast<std::uint64_t>(key.m), static_cast<std::uint64_t>(key.n),
                            static_cast<std::uint64_t>(key.k), static_cast<std::uint64_t>(key.alpha_bits),
                            static_cast<std::uint64_t>(key.beta_bits), static_cast<std::uint64_t>(key.lda),
                            static_cast<std::uint64_t>(key.ldb), static_cast<std::uint64_t>(key.ldc)})
      h = (h ^ v) * 0x100000001B3ull;
    return h;
  }
};

struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  std::size_t scratch_bytes = 0;
  bool defers_signals = true;  // not a brgemm kernel: may run on a heap stack (see the file comment)
};

// Logical [rows, cols]; stored row-major as is, or as its transpose [cols, rows], with row stride ld
// (0: dense).
dnnl::memory::dims strides(bool trans, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return trans ? dnnl::memory::dims{1, ld ? ld : rows} : dnnl::memory::dims{ld ? ld : cols, 1};
}

std::shared_ptr<const Primitive> create_primitive(const Key& key) {
  auto p = std::make_shared<Primitive>();
  p->a = dnnl::memory::desc({key.m, key.k}, dnnl_type(key.ab), strides(key.ta, key.m, key.k, key.lda));
  p->b = dnnl::memory::desc({key.k, key.n}, dnnl_type(key.ab), strides(key.tb, key.k, key.n, key.ldb));
  p->c = dnnl::memory::desc({key.m, key.n}, dnnl_type(key.c), strides(false, key.m, key.n, key.ldc));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: one primitive, many threads
  const float alpha = std::bit_cast<float>(key.alpha_bits), beta = std::bit_cast<float>(key.beta_bits);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const OmpSingleThread single;
  p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->c), attr, engine());
  p->prim = dnnl::matmul(p->pd);
  p->scratch_bytes = p->pd.scratchpad_desc().get_size();
  p->defers_signals = std::string_view(p->pd.impl_info_str()).rfind("brg", 0) != 0;
  return p;
}

// Shapes seen so far. Lookups take a shared lock; a miss creates the primitive outside the lock (JIT
// takes milliseconds) and the first insert wins. Kernels with ragged tails bring a few shapes each, so
// the cache stays small; past kCapacity it is emptied (running calls keep their shared_ptr).
class PrimitiveCache {
 public:
  std::shared_ptr<const Primitive> get(const Key& key) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    std::shared_ptr<const Primitive> made = create_primitive(key);
    std::unique_lock lock(mutex_);
    if (map_.size() >= kCapacity) map_.clear();
    return map_.try_emplace(key, std::move(made)).first->second;
  }

 private:
  static constexpr std::size_t kCapacity = 4096;
  std::shared_mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const Primitive>, KeyHash> map_;
};

PrimitiveCache& cache() {
  // Never destroyed: the Python module and thread-exit paths may run kernels while statics go away.
  static PrimitiveCache* c = new PrimitiveCache();
  return *c;
}

// ---- per-thread buffers --------------------------------------------------------------------------

// Grow-only, 64-byte aligned buffers owned by the calling thread.
class ThreadBuffer {
 public:
  void* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      LMCORE_CHECK(data_ != nullptr, "gemm_lowp: could not allocate {} bytes of scratch", bytes);
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

struct ThreadBuffers {
  ThreadBuffer scratchpad, a, b, c;
  ThreadBuffer partials;  // a K-split product's f32 partial sums (run_cut, on the calling thread)
};

ThreadBuffers& thread_buffers() {
  thread_local ThreadBuffers buffers;
  return buffers;
}

// A primitive's memory objects and argument map for the calling thread. Creating them (and a stream)
// on every call cost a few microseconds of allocations: a third of a 128 x 384 x 64 attention tile
// product on AMX. Each entry keeps its primitive alive, so an address is never reused for another.
struct BoundPrimitive {
  std::shared_ptr<const Primitive> prim;
  dnnl::memory a, b, c, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
};

BoundPrimitive& bound_primitive(const std::shared_ptr<const Primitive>& p) {
  thread_local std::unordered_map<const Primitive*, BoundPrimitive> bound;
  if (auto it = bound.find(p.get()); it != bound.end()) return it->second;
  if (bound.size() >= 256) bound.clear();  // shapes come and go (ragged tails); keep the table small
  dnnl::engine& eng = engine();
  BoundPrimitive e{p,
                   dnnl::memory(p->a, eng, nullptr),
                   dnnl::memory(p->b, eng, nullptr),
                   dnnl::memory(p->c, eng, nullptr),
                   dnnl::memory(p->pd.scratchpad_desc(), eng, nullptr),
                   {}};
  e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}, {DNNL_ARG_SCRATCHPAD, e.scratchpad}};
  return bound.emplace(p.get(), std::move(e)).first->second;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(engine());
  return stream;
}

// Copies a stored [rows, cols] matrix with row stride ld into dense rows.
void pack_rows(void* dst, const void* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t item) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * item;
  for (std::int64_t r = 0; r < rows; ++r) std::memcpy(d + r * row_bytes, s + r * ld * static_cast<std::int64_t>(item), row_bytes);
}

void unpack_rows(void* dst, std::int64_t ld, const void* src, std::int64_t rows, std::int64_t cols, std::size_t item) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * item;
  for (std::int64_t r = 0; r < rows; ++r) std::memcpy(d + r * ld * static_cast<std::int64_t>(item), s + r * row_bytes, row_bytes);
}

// ---- one block on the calling thread --------------------------------------------------------------

struct Gemm {
  DType ab, c_dtype;
  bool ta, tb;
  std::int64_t m, n, k;
  float alpha;
  const void* a;
  std::int64_t lda;
  const void* b;
  std::int64_t ldb;
  float beta;
  void* c;
  std::int64_t ldc;
  bool keep_strides = false;  // oneDNN takes A and B with their strides even when bf16 (a K slice)
};

// Stored shape of op(X) = [rows, cols] given its transpose flag.
struct Stored {
  std::int64_t rows, cols;
};
Stored stored(bool trans, std::int64_t rows, std::int64_t cols) { return trans ? Stored{cols, rows} : Stored{rows, cols}; }

void run_onednn_block(const Gemm& g) {
  ThreadBuffers& buf = thread_buffers();
  const std::size_t in_item = dtype_size(g.ab), out_item = dtype_size(g.c_dtype);
  // 1. Dense operands: a single stored row is dense whatever its stride. f32 keeps its strides:
  // oneDNN then takes its jit sgemm (143-197 GFLOPS on Zen 5 against brgemm's ~200 on dense
  // operands) and no copy is made; packed copies of the fused loss's tile slices grew its peak
  // memory by a third.
  const bool keep_strides = g.ab == DType::f32 || g.keep_strides;
  const Stored sa = stored(g.ta, g.m, g.k), sb = stored(g.tb, g.k, g.n);
  const void* a = g.a;
  if (!keep_strides && sa.rows > 1 && g.lda != sa.cols) {
    void* p = buf.a.get(static_cast<std::size_t>(sa.rows * sa.cols) * in_item);
    pack_rows(p, g.a, sa.rows, sa.cols, g.lda, in_item);
    a = p;
  }
  const void* b = g.b;
  if (!keep_strides && sb.rows > 1 && g.ldb != sb.cols) {
    void* p = buf.b.get(static_cast<std::size_t>(sb.rows * sb.cols) * in_item);
    pack_rows(p, g.b, sb.rows, sb.cols, g.ldb, in_item);
    b = p;
  }
  void* c = g.c;
  const bool stage_c = !keep_strides && g.m > 1 && g.ldc != g.n;
  if (stage_c) {
    c = buf.c.get(static_cast<std::size_t>(g.m * g.n) * out_item);
    if (g.beta != 0.0f) pack_rows(c, g.c, g.m, g.n, g.ldc, out_item);
  }
  // 2. The cached primitive for this shape (and strides), run with this thread's scratchpad,
  // through this thread's memory objects for it (only their data pointers change between calls).
  Key key{g.ab, g.c_dtype, g.ta, g.tb, g.m, g.n, g.k, std::bit_cast<std::uint32_t>(g.alpha),
          std::bit_cast<std::uint32_t>(g.beta)};
  if (keep_strides) {
    // Strides that differ from the dense ones only where they cannot matter (one stored row) stay 0.
    key.lda = sa.rows > 1 && g.lda != sa.cols ? g.lda : 0;
    key.ldb = sb.rows > 1 && g.ldb != sb.cols ? g.ldb : 0;
    key.ldc = g.m > 1 && g.ldc != g.n ? g.ldc : 0;
  }
  const std::shared_ptr<const Primitive> p = cache().get(key);
  {
    const OmpSingleThread single;
    BoundPrimitive& bound = bound_primitive(p);
    bound.a.set_data_handle(const_cast<void*>(a));
    bound.b.set_data_handle(const_cast<void*>(b));
    bound.c.set_data_handle(c);
    bound.scratchpad.set_data_handle(p->scratch_bytes ? buf.scratchpad.get(p->scratch_bytes) : nullptr);
    const std::optional<DeferredSignals> held =
        p->defers_signals ? std::optional<DeferredSignals>(std::in_place) : std::nullopt;
    p->prim.execute(thread_stream(), bound.args);
    thread_stream().wait();
  }
  // 3. A staged C goes back to its strided home.
  if (stage_c) unpack_rows(g.c, g.ldc, c, g.m, g.n, out_item);
}

// Widens a stored [rows, cols] bf16/f16 matrix with row stride ld into dense f32 rows.
void widen_rows(float* dst, DType dt, const void* src, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r) {
    if (dt == DType::bf16)
      detail::cast_bf16_to_f32(dst + r * cols, static_cast<const bf16*>(src) + r * ld, cols);
    else
      detail::cast_f16_to_f32(dst + r * cols, static_cast<const f16*>(src) + r * ld, cols);
  }
}

// Rounds dense f32 rows into a stored bf16/f16 matrix with row stride ld (the inverse of widen_rows).
void narrow_rows(void* dst, DType dt, std::int64_t ld, const float* src, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    if (dt == DType::bf16)
      detail::cast_f32_to_bf16(static_cast<bf16*>(dst) + r * ld, src + r * cols, cols);
    else
      detail::cast_f32_to_f16(static_cast<f16*>(dst) + r * ld, src + r * cols, cols);
  }
}

void run_widened_block(const Gemm& g) {
  ThreadBuffers& buf = thread_buffers();
  const Stored sa = stored(g.ta, g.m, g.k), sb = stored(g.tb, g.k, g.n);
  auto* a32 = static_cast<float*>(buf.a.get(static_cast<std::size_t>(sa.rows * sa.cols) * sizeof(float)));
  auto* b32 = static_cast<float*>(buf.b.get(static_cast<std::size_t>(sb.rows * sb.cols) * sizeof(float)));
  widen_rows(a32, g.ab, g.a, sa.rows, sa.cols, g.lda);
  widen_rows(b32, g.ab, g.b, sb.rows, sb.cols, g.ldb);
  if (g.c_dtype == DType::f32) {
    gemm_f32(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a32, sa.cols, b32, sb.cols, g.beta, static_cast<float*>(g.c), g.ldc);
    return;
  }
  // Low-precision C: f32 result (with beta * C widened), rounded once.
  auto* c32 = static_cast<float*>(buf.c.get(static_cast<std::size_t>(g.m * g.n) * sizeof(float)));
  if (g.beta != 0.0f) widen_rows(c32, g.c_dtype, g.c, g.m, g.n, g.ldc);
  gemm_f32(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a32, sa.cols, b32, sb.cols, g.beta, c32, g.n);
  narrow_rows(g.c, g.c_dtype, g.ldc, c32, g.m, g.n);
}

// Scales C by beta in place (K == 0); beta == 0 writes zeros without reading C.
void scale_c(DType c_dtype, std::int64_t m, std::int64_t n, float beta, void* c, std::int64_t ldc) {
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      if (c_dtype == DType::f32) {
        float& v = static_cast<float*>(c)[r * ldc + j];
        v = beta == 0.0f ? 0.0f : beta * v;
      } else if (c_dtype == DType::bf16) {
        bf16& v = static_cast<bf16*>(c)[r * ldc + j];
        v = bf16::from_f32(beta == 0.0f ? 0.0f : beta * v.to_f32());
      } else {
        f16& v = static_cast<f16*>(c)[r * ldc + j];
        v = f16::from_f32(beta == 0.0f ? 0.0f : beta * v.to_f32());
      }
    }
}

void check_args(const Gemm& g, const char* op) {
  check_ab_dtype(g.ab, op);
  LMCORE_CHECK(g.c_dtype == DType::f32 || g.c_dtype == g.ab,
               "{}: argument 'c_dtype' expected f32 or the inputs' dtype {}, found {}", op, g.ab, g.c_dtype);
  LMCORE_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "{}: sizes must be >= 0, found m = {}, n = {}, k = {}", op, g.m, g.n,
               g.k);
  const Stored sa = stored(g.ta, g.m, g.k), sb = stored(g.tb, g.k, g.n);
  LMCORE_CHECK(g.lda >= std::max<std::int64_t>(sa.cols, 1),
               "{}: argument 'lda' = {} is smaller than a stored row of A ({} elements, trans_a = {})", op, g.lda,
               sa.cols, g.ta);
  LMCORE_CHECK(g.ldb >= std::max<std::int64_t>(sb.cols, 1),
               "{}: argument 'ldb' = {} is smaller than a stored row of B ({} elements, trans_b = {})", op, g.ldb,
               sb.cols, g.tb);
  LMCORE_CHECK(g.ldc >= std::max<std::int64_t>(g.n, 1), "{}: argument 'ldc' = {} is smaller than a row of C ({} elements)",
               op, g.ldc, g.n);
  const bool empty = g.m == 0 || g.n == 0;
  LMCORE_CHECK(empty || g.c != nullptr, "{}: argument 'c' is null for a [{}, {}] result", op, g.m, g.n);
  LMCORE_CHECK(empty || g.k == 0 || (g.a != nullptr && g.b != nullptr), "{}: argument '{}' is null with k = {}", op,
               g.a == nullptr ? "a" : "b", g.k);
}

// A block of rows [lo, hi) or of columns [lo, hi) of C as a product of its own.
Gemm row_block(const Gemm& g, std::int64_t lo, std::int64_t hi) {
  Gemm s = g;
  s.m = hi - lo;
  s.a = static_cast<const std::byte*>(g.a) + (g.ta ? lo : lo * g.lda) * static_cast<std::int64_t>(dtype_size(g.ab));
  s.c = static_cast<std::byte*>(g.c) + lo * g.ldc * static_cast<std::int64_t>(dtype_size(g.c_dtype));
  return s;
}
Gemm col_block(const Gemm& g, std::int64_t lo, std::int64_t hi) {
  Gemm s = g;
  s.n = hi - lo;
  s.b = static_cast<const std::byte*>(g.b) + (g.tb ? lo * g.ldb : lo) * static_cast<std::int64_t>(dtype_size(g.ab));
  s.c = static_cast<std::byte*>(g.c) + lo * static_cast<std::int64_t>(dtype_size(g.c_dtype));
  return s;
}

// A slice [lo, hi) of K as a product of its own, f32 into `partial` (dense [m, n]), alpha 1, beta 0.
// Its operands keep their strides (a slice of A is not dense): oneDNN then runs its jit gemm, which on
// AVX-512 BF16 without AMX is as fast as brgemm on a packed copy or faster (see cut_k_pays).
Gemm k_slice(const Gemm& g, std::int64_t lo, std::int64_t hi, float* partial) {
  Gemm s = g;
  const std::int64_t item = static_cast<std::int64_t>(dtype_size(g.ab));
  s.k = hi - lo;
  s.a = static_cast<const std::byte*>(g.a) + (g.ta ? lo * g.lda : lo) * item;
  s.b = static_cast<const std::byte*>(g.b) + (g.tb ? lo : lo * g.ldb) * item;
  s.c_dtype = DType::f32;
  s.c = partial;
  s.ldc = g.n;
  s.alpha = 1.0f;
  s.beta = 0.0f;
  s.keep_strides = true;
  return s;
}

// Rows [r0, r1) of C = alpha * (the sum of the parts' partials) + beta * C, in C's dtype: a
// low-precision C is widened (when beta reads it) and rounded once, as in run_widened_block.
void add_partials(const Gemm& g, const float* partials, std::int64_t parts, std::int64_t r0, std::int64_t r1,
                  std::vector<float>& row, std::vector<float>& c_row) {
  const std::int64_t n = g.n, plane = g.m * g.n;
  const bool f32 = g.c_dtype == DType::f32;
  row.resize(static_cast<std::size_t>(n));
  c_row.resize(static_cast<std::size_t>(n));
  for (std::int64_t r = r0; r < r1; ++r) {
    float* acc = row.data();
    std::copy_n(partials + r * n, n, acc);
    for (std::int64_t p = 1; p < parts; ++p) {
      const float* q = partials + p * plane + r * n;
      for (std::int64_t j = 0; j < n; ++j) acc[j] += q[j];
    }
    const std::int64_t at = r * g.ldc * static_cast<std::int64_t>(dtype_size(g.c_dtype));
    void* c = static_cast<std::byte*>(g.c) + at;
    const float* old = static_cast<const float*>(c);
    if (!f32 && g.beta != 0.0f) {
      widen_rows(c_row.data(), g.c_dtype, c, 1, n, n);
      old = c_row.data();
    }
    float* out = f32 ? static_cast<float*>(c) : acc;
    for (std::int64_t j = 0; j < n; ++j) out[j] = g.alpha * acc[j] + (g.beta == 0.0f ? 0.0f : g.beta * old[j]);
    if (!f32) narrow_rows(c, g.c_dtype, n, acc, 1, n);
  }
}

// Whether to cut K rather than rows. A row block packs all of B for its few rows, so with T threads B
// is packed T times; K slices pack each part of B once but add T f32 partials of C afterwards, which
// pays when K is long against the rows per thread. Measured on Zen 5, bf16 on oneDNN, 2 threads, GFLOPS
// for rows / K slices (oneDNN's own 2-thread partition): 256 x 1024 x 4096 604-688 / 665-727
// (676-750), 128 x 1024 x 4096 566 / 637 (629), 1024 x 1024 x 4096 663 / 705 (660), 1024 x 1024 x 8192
// 701 / 774 (705), 512 x 2048 x 8192 655 / 742 (665); with K 2048 and less the slices lost (256 x 1024
// x 2048 712 / 673, 256 x 4096 x 1024 608 / 578). The widened path (f32 copies of each block's
// operands) gains likewise: 256 x 1024 x 4096 268-276 -> 321-354 GFLOPS. Not taken for f32 (oneDNN's
// jit sgemm on a strided slice is slower than its brgemm) nor with AMX (whose kernels need dense
// operands, so each A slice would be copied; not measured). The partials are capped at 16 MiB.
bool cut_k_pays(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t threads) {
  if (threads < 2) return false;
  const double partial_floats = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(threads);
  return k >= 4096 && k >= 8 * (m / threads) && partial_floats <= 4.0 * 1024 * 1024;
}

// Runs g as one block, or (may_split) cut into blocks over lmcore's pool: K slices when may_cut_k and
// cut_k_pays, else rows on multiples of 16 (AMX tiles hold 16 rows) or, for short wide products,
// columns on multiples of 64. Each block keeps at least ~2M multiply-adds so a pool wake-up stays a
// small fraction.
template <typename RunBlock>
void run_cut(const Gemm& g, RunBlock run_block, bool may_split, bool may_cut_k) {
  const std::int64_t m = g.m, n = g.n, k = g.k;
  const std::int64_t threads = may_split ? num_threads() : 1;
  constexpr double kMinBlockMacs = 2.0 * 1024 * 1024;
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const std::int64_t by_work = static_cast<std::int64_t>(macs / kMinBlockMacs);
  if (may_cut_k && by_work >= threads && cut_k_pays(m, n, k, threads)) {
    const std::int64_t parts = threads;
    auto* partials = static_cast<float*>(
        thread_buffers().partials.get(static_cast<std::size_t>(parts * m * n) * sizeof(float)));
    parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t lo = p == 0 ? 0 : k * p / parts / 64 * 64;
        const std::int64_t hi = p + 1 == parts ? k : k * (p + 1) / parts / 64 * 64;
        run_block(k_slice(g, lo, hi, partials + p * m * n));
      }
    });
    parallel_for(0, m, std::max<std::int64_t>(1, m / threads), [&](std::int64_t r0, std::int64_t r1) {
      thread_local std::vector<float> row, c_row;
      add_partials(g, partials, parts, r0, r1, row, c_row);
    });
    return;
  }
  const bool by_rows = m >= 64 * std::min<std::int64_t>(threads, 2) || m >= n;
  const std::int64_t extent = by_rows ? m : n, align = by_rows ? 16 : 64;
  const std::int64_t parts = std::max<std::int64_t>(1, std::min({threads, by_work, extent / align}));
  if (parts <= 1) {
    run_block(g);
    return;
  }
  // Blocks on lmcore's pool, one single-threaded product each.
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t lo = p == 0 ? 0 : extent * p / parts / align * align;
      const std::int64_t hi = p + 1 == parts ? extent : extent * (p + 1) / parts / align * align;
      if (hi > lo) run_block(by_rows ? row_block(g, lo, hi) : col_block(g, lo, hi));
    }
  });
}

}  // namespace

void gemm_lowp(DType ab, DType c_dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
               std::int64_t ldc) {
  const Gemm g{ab, c_dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  // 1. Arguments and the degenerate sizes.
  check_args(g, "gemm_lowp");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(c_dtype, m, n, beta, c, ldc);
    return;
  }
  // 2. Path and cut.
  const bool onednn = lowp_gemm_path(ab) == LowpGemmPath::onednn;
  const std::optional<BlasSingleThreaded> blas_guard =
      onednn ? std::nullopt : std::optional<BlasSingleThreaded>(std::in_place);
  if (onednn) run_cut(g, run_onednn_block, !in_parallel_region(), !isa_includes(dnnl::cpu_isa::avx512_core_amx));
  else run_cut(g, run_widened_block, !in_parallel_region(), true);
}

void gemm_f32_onednn(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                     const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                     std::int64_t ldc, bool may_split) {
  const Gemm g{DType::f32, DType::f32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(DType::f32, m, n, beta, c, ldc);
    return;
  }
  run_cut(g, run_onednn_block, may_split, false);
}

bool onednn_has_avx512() { return env_allows_onednn() && isa_includes(dnnl::cpu_isa::avx512_core); }

LowpGemmPath lowp_gemm_path(DType ab) {
  check_ab_dtype(ab, "lowp_gemm_path");
  if (ab == DType::bf16 && g_onednn_enabled.load(std::memory_order_relaxed) && env_allows_onednn() &&
      cpu_has_bf16_units())
    return LowpGemmPath::onednn;
  return LowpGemmPath::widened;
}

void set_lowp_gemm_onednn(bool enabled) { g_onednn_enabled.store(enabled, std::memory_order_relaxed); }

std::string lowp_gemm_path_description(DType ab) {
  check_ab_dtype(ab, "lowp_gemm_path_description");
  if (lowp_gemm_path(ab) == LowpGemmPath::onednn) {
    // The implementation oneDNN picks for a representative dense shape (all shapes get the same family).
    static const std::string impl = [] {
      const Key key{DType::bf16, DType::f32, false, false, 256, 256, 256, std::bit_cast<std::uint32_t>(1.0f), 0};
      return std::string(cache().get(key)->pd.impl_info_str());
    }();
    return fmt::format("oneDNN matmul ({}), f32 accumulation", impl);
  }
  std::string why;
  if (ab == DType::f16) why = "oneDNN 2.6 has no f16 CPU matmul";
  else if (!g_onednn_enabled.load()) why = "set_lowp_gemm_onednn(false)";
  else if (!env_allows_onednn()) why = "LMCORE_ONEDNN=0";
  else why = fmt::format("oneDNN ISA {} lacks AVX-512 BF16", isa_name(effective_isa()));
  // The widened operands go through gemm_f32, so they take whichever f32 path its rule picked.
  const char* f32 = f32_gemm_path() == F32GemmPath::onednn ? "oneDNN's f32 matmul" : "OpenBLAS sgemm";
  return fmt::format("widened to f32, {} ({})", f32, why);
}

std::string onednn_info() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{} isa {}", v->major, v->minor, v->patch, isa_name(effective_isa()));
}

}  // namespace lmcore
