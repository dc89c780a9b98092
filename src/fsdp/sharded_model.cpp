// The sharded model: one rank's shards, and the UnitAccess that gathers units before the model uses
// them and reduce-scatters their gradients after.
#include "lmcore/fsdp/sharded_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "lmcore/core/copy.h"
#include "lmcore/core/error.h"
#include "lmcore/core/fault_injection.h"
#include "lmcore/model/grad_norm.h"

namespace lmcore::fsdp {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// dst[0, n) += src[0, n) (src f32 or bf16).
void add_into(float* dst, const Tensor& src) {
  const Tensor s = src.dtype() == DType::f32 ? src : src.to(DType::f32);
  const float* p = s.data<float>();
  for (std::int64_t i = 0; i < s.numel(); ++i) dst[i] += p[i];
}
}  // namespace

class ShardedLlama::Access final : public model::UnitAccess {
 public:
  explicit Access(ShardedLlama& s) : s_(s), units_(s.units_.size()) {}

  const void* weights(int u) override {
    if (forward_) fault_point("fsdp.forward");
    Unit& x = units_[u];
    if (!x.full.defined() && !x.in_flight) issue_gather(u);
    if (x.in_flight) {
      const auto t = Clock::now();
      x.gather.wait();
      stats_.gather_wait_s += seconds_since(t);
      x.in_flight = false;
      x.gather = dist::Work();
      x.k_chunk = Tensor();
    }
    prefetch_after(u);
    account();
    return x.full.data_ptr();
  }

  float* grads(int u) override {
    Unit& x = units_[u];
    if (!x.full_grad.defined()) {
      x.full_grad = spare_.take(s_.units_[u].padded, DType::f32);
      std::fill_n(x.full_grad.data<float>(), x.full_grad.numel(), 0.0f);
      account();
    }
    return x.full_grad.data<float>();
  }

  void release(int u) override {
    Unit& x = units_[u];
    if (u == 0) return;  // the root stays gathered through the micro-batch (end_step frees it)
    // The last block's forward ends right before the head, and backward starts with that block: it
    // stays gathered between the two, as the root does, instead of being freed and gathered again
    // (the memory it holds is the same that the first backward unit's prefetch would take).
    if (forward_ && with_backward_ && u == last_unit()) return;
    const int policy = s_.reshard_policy();
    if (!forward_ || !with_backward_ || policy == s_.world_) {
      spare_.give(std::move(x.full));
    } else if (policy > 1) {
      // Keep 1/k: the chunk this rank holds within its group of k consecutive ranks.
      const std::int64_t chunk = s_.units_[u].padded / policy;
      x.k_chunk = x.full.narrow(0, (s_.rank_ % policy) * chunk, chunk).clone();
      spare_.give(std::move(x.full));
    }  // policy 0: keep the full parameters for the backward
  }

  void grads_ready(int u) override {
    if (!s_.sync_) return;  // accumulate unsharded until the last micro-batch
    // One reduce-scatter in flight at a time (FSDP2's rule): the previous unit's finished during this
    // unit's backward, or is waited for now, so unsharded gradients never pile up beyond two units.
    for (std::size_t v = 0; v < units_.size(); ++v)
      if (units_[v].rs_pending) finish_reduce(static_cast<int>(v));
    Unit& x = units_[u];
    const UnitShard& us = s_.units_[u];
    if (s_.options_.reduce_dtype == DType::f32) {
      x.rs_in = std::move(x.full_grad);
    } else {
      x.rs_in = spare_.take(us.padded, s_.options_.reduce_dtype);
      copy_cast(x.full_grad, x.rs_in);
      spare_.give(std::move(x.full_grad));
    }
    x.rs_out = Tensor::empty({us.shard}, s_.options_.reduce_dtype);
    dist::ProcessGroup& g = s_.rs_group_ ? *s_.rs_group_ : *s_.pg_;
    x.rs = g.reduce_scatter_single_async(x.rs_out, x.rs_in, {.op = dist::ReduceOp::avg});
    x.rs_pending = true;
    ++stats_.reduce_scatters;
    account();
    fault_point("fsdp.reduce_scatter");
  }

  void begin_forward(bool with_backward) override {
    forward_ = true;
    with_backward_ = with_backward;
    order_.clear();
    for (std::size_t u = 0; u < units_.size(); ++u) order_.push_back(static_cast<int>(u));
  }

  void begin_backward() override {
    forward_ = false;
    order_.clear();
    for (int u = static_cast<int>(units_.size()) - 1; u >= 1; --u) order_.push_back(u);
    // Backward starts with the last block, still gathered from forward (release); deeper prefetch starts
    // the next ones now.
    for (int i = 0; i < s_.options_.prefetch && i < static_cast<int>(order_.size()); ++i) issue_if_needed(order_[i]);
  }

  void end_step() override {
    for (std::size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      if (x.rs_pending) finish_reduce(static_cast<int>(u));
      if (x.in_flight) {  // a prefetch nobody used (e.g. an evaluation pass): finish it before freeing
        x.gather.wait();
        x.in_flight = false;
        x.gather = dist::Work();
      }
      spare_.give(std::move(x.full));
      x.k_chunk = Tensor();
    }
    account();
  }

  // Bytes held by the unsharded buffers of every unit now; updates the peak.
  void account() {
    std::size_t now = 0;
    for (const Unit& x : units_)
      for (const Tensor* t : {&x.full, &x.k_chunk, &x.full_grad, &x.rs_in, &x.rs_out})
        if (t->defined()) now += t->nbytes();
    now += spare_.bytes();
    stats_.unsharded_bytes = now;
    stats_.peak_unsharded_bytes = std::max(stats_.peak_unsharded_bytes, now);
  }

  bool has_unsynced_grads() const {
    for (const Unit& x : units_)
      if (x.full_grad.defined()) return true;
    return false;
  }
  void drop_unsynced_grads() {
    for (Unit& x : units_) x.full_grad = Tensor();
    spare_.clear();
  }

  CommStats stats_;

 private:
  struct Unit {
    Tensor full;     // gathered parameters (param dtype, padded)
    Tensor k_chunk;  // reshard-to-k: this rank's 1/k of them between forward and backward
    dist::Work gather;
    bool in_flight = false;
    Tensor full_grad;       // f32, padded: the model adds into it
    Tensor rs_in, rs_out;   // reduce-scatter input (reduce dtype) and this rank's averaged shard
    dist::Work rs;
    bool rs_pending = false;
  };

  // Waits for unit u's reduce-scatter and adds its averaged shard into the gradient shard.
  void finish_reduce(int u) {
    Unit& x = units_[u];
    const auto t = Clock::now();
    x.rs.wait();
    stats_.reduce_wait_s += seconds_since(t);
    add_into(s_.grads_.data<float>() + s_.units_[u].local, x.rs_out);
    x.rs = dist::Work();
    spare_.give(std::move(x.rs_in));
    x.rs_out = Tensor();
    x.rs_pending = false;
  }

  void issue_gather(int u) {
    Unit& x = units_[u];
    const UnitShard& us = s_.units_[u];
    x.full = spare_.take(us.padded, s_.options_.param_dtype);
    if (x.k_chunk.defined()) {
      // Between forward and backward this rank kept 1/k: gather within its group of k.
      x.gather = s_.k_group_->all_gather_single_async(x.full, x.k_chunk);
    } else {
      x.gather = s_.pg_->all_gather_single_async(x.full, s_.compute_shard_.narrow(0, us.local, us.shard));
    }
    x.in_flight = true;
    ++stats_.gathers;
  }

  void issue_if_needed(int u) {
    if (!units_[u].full.defined() && !units_[u].in_flight) issue_gather(u);
  }

  void prefetch_after(int u) {
    const auto it = std::find(order_.begin(), order_.end(), u);
    if (it == order_.end()) return;
    for (int i = 1; i <= s_.options_.prefetch && it + i < order_.end(); ++i) issue_if_needed(*(it + i));
  }

  int last_unit() const { return static_cast<int>(units_.size()) - 1; }

  // Unsharded buffers the units are done with, kept for the next unit of the same size: the blocks
  // all have one size, so a step's gathers and gradients cycle through a few buffers instead of
  // mapping fresh memory for each (whose page faults and zeroing by the kernel took about a tenth of
  // a rank's CPU, 4 ranks on the shaped link; see bench fsdp). At most kSpares buffers a size and
  // dtype, counted in the unsharded bytes.
  class Spares {
   public:
    Tensor take(std::int64_t numel, DType dtype) {
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->numel() == numel && it->dtype() == dtype) {
          Tensor t = std::move(*it);
          free_.erase(it);
          return t;
        }
      return Tensor::empty({numel}, dtype);
    }
    // Keeps t when nothing else holds its memory and its size has room, else frees it.
    void give(Tensor&& t) {
      Tensor held = std::move(t);
      if (!held.defined() || held.storage().use_count() != 1 || held.storage_offset() != 0) return;
      const auto same = std::count_if(free_.begin(), free_.end(), [&](const Tensor& f) {
        return f.numel() == held.numel() && f.dtype() == held.dtype();
      });
      if (same < kSpares) free_.push_back(std::move(held));
    }
    std::size_t bytes() const {
      std::size_t n = 0;
      for (const Tensor& f : free_) n += f.nbytes();
      return n;
    }
    void clear() { free_.clear(); }

   private:
    static constexpr std::ptrdiff_t kSpares = 2;
    std::vector<Tensor> free_;
  };

  ShardedLlama& s_;
  std::vector<Unit> units_;
  Spares spare_;
  std::vector<int> order_;
  bool forward_ = true, with_backward_ = true;
};

dist::GroupOptions group_options_for_sharding(dist::GroupOptions base) {
  base.direct_max_bytes = std::numeric_limits<std::size_t>::max();
  base.inline_max_bytes = 0;
  return base;
}

int ShardedLlama::reshard_policy() const {
  const int p = options_.reshard_after_forward;
  return p < 0 || p >= world_ ? world_ : (p == 1 ? world_ : p);
}

ShardedLlama::ShardedLlama(const model::ModelConfig& config, const model::ModelOptions& options, dist::ProcessGroup& pg,
                           const FsdpOptions& fsdp)
    : options_(fsdp), pg_(&pg), rank_(pg.rank()), world_(pg.world_size()) {
  LMCORE_CHECK(fsdp.param_dtype == DType::f32 || fsdp.param_dtype == DType::bf16,
               "fsdp: param_dtype must be f32 or bf16, found {}", fsdp.param_dtype);
  LMCORE_CHECK(fsdp.reduce_dtype == DType::f32 || fsdp.reduce_dtype == DType::bf16,
               "fsdp: reduce_dtype must be f32 or bf16, found {}", fsdp.reduce_dtype);
  LMCORE_CHECK(fsdp.prefetch >= 0, "fsdp: prefetch must be >= 0, found {}", fsdp.prefetch);
  const int k = fsdp.reshard_after_forward;
  LMCORE_CHECK(k < 0 || k == 0 || k == 1 || k >= world_ || world_ % k == 0,
               "fsdp: reshard_after_forward = {} must divide the world size {} (or be true/false)", k, world_);
  model::ModelOptions mo = options;
  mo.compute = fsdp.param_dtype;
  mo.own_parameters = false;
  model_ = std::make_unique<model::Llama>(config, mo);
  std::int64_t local = 0;
  for (const model::UnitSpec& u : model_->layout().units()) {
    UnitShard s;
    s.offset = u.offset;
    s.numel = u.numel;
    s.padded = (u.numel + world_ - 1) / world_ * world_;
    s.shard = s.padded / world_;
    s.local = local;
    local += s.shard;
    units_.push_back(s);
  }
  params_ = Tensor::zeros({local}, DType::f32);
  grads_ = Tensor::zeros({local}, DType::f32);
  compute_shard_ = fsdp.param_dtype == DType::f32 ? params_ : Tensor::zeros({local}, fsdp.param_dtype);
  // The extra groups share the main group's store under their own names.
  dist::GroupOptions go = fsdp.group_options;
  go.rank = rank_;
  go.world_size = world_;
  if (fsdp.separate_reduce_scatter_group) {
    dist::GroupOptions r = go;
    r.name = go.name + "-fsdp-rs";
    rs_group_ = std::make_unique<dist::ProcessGroup>(r);
  }
  const int policy = reshard_policy();
  if (policy > 1 && policy < world_) {
    dist::GroupOptions r = go;
    r.name = fmt::format("{}-fsdp-k{}-{}", go.name, policy, rank_ / policy);
    r.rank = rank_ % policy;
    r.world_size = policy;
    k_group_ = std::make_unique<dist::ProcessGroup>(r);
  }
  // Without prefetch, the reduce-scatters leave the link to the all-gather that the next unit waits
  // for, and take the gaps (two groups that split one link evenly would finish that gather only when
  // both are done, as one group does). With prefetch the gather that backward waits for next was
  // issued a unit earlier, before the reduce-scatter, and the pieces would only cost wake-ups (4
  // ranks on the shaped link: the overlapped step was 4-7% slower with them in 3 of 4 A/B pairs).
  if (rs_group_ && fsdp.prefetch == 0) {
    rs_group_->give_way_to(*pg_);
    if (k_group_) rs_group_->give_way_to(*k_group_);
  }
  access_ = std::make_unique<Access>(*this);
  model_->set_unit_access(access_.get());
}

ShardedLlama::~ShardedLlama() = default;

std::vector<model::ShardPiece> ShardedLlama::pieces() const {
  std::vector<model::ShardPiece> out;
  for (const UnitShard& u : units_) {
    const std::int64_t begin = static_cast<std::int64_t>(rank_) * u.shard;  // within the padded unit
    const std::int64_t real = std::clamp<std::int64_t>(u.numel - begin, 0, u.shard);
    out.push_back({u.offset + std::min(begin, u.numel), real, u.shard});
  }
  return out;
}

void ShardedLlama::init_weights(std::uint64_t seed) {
  const auto p = pieces();
  float* dst = params_.data<float>();
  for (std::size_t i = 0; i < p.size(); ++i) {
    model::init_parameters(layout(), config(), seed, p[i].global_begin, p[i].global_begin + p[i].real,
                           dst + units_[i].local);
    std::fill(dst + units_[i].local + p[i].real, dst + units_[i].local + p[i].length, 0.0f);
  }
  params_updated();
}

void ShardedLlama::zero_grad() {
  grads_.zero_();
  access_->drop_unsynced_grads();
}

void ShardedLlama::params_updated() {
  if (options_.param_dtype != DType::f32) compute_shard_.copy_(params_);
}

model::StepLoss ShardedLlama::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                               float grad_scale) {
  return model_->forward_backward(tokens, targets, grad_scale);
}

model::StepLoss ShardedLlama::forward_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  return model_->forward_loss(tokens, targets);
}

double ShardedLlama::grad_norm() {
  Tensor s = Tensor::full({1}, model::grad_norm_squared(grads_.data<float>(), grads_.numel()), DType::f64);
  pg_->all_reduce(s, {.op = dist::ReduceOp::sum});
  return std::sqrt(s.data<double>()[0]);
}

std::string ShardedLlama::first_nonfinite_gradient() {
  const float* g = grads_.data<float>();
  const auto p = pieces();
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < p.size() && first == std::numeric_limits<std::int64_t>::max(); ++i)
    for (std::int64_t j = 0; j < p[i].real; ++j)
      if (!std::isfinite(g[units_[i].local + j])) {
        first = p[i].global_begin + j;
        break;
      }
  Tensor t = Tensor::full({1}, static_cast<double>(first), DType::i64);
  t.data<std::int64_t>()[0] = first;
  pg_->all_reduce(t, {.op = dist::ReduceOp::min});
  first = t.data<std::int64_t>()[0];
  if (first == std::numeric_limits<std::int64_t>::max()) return "";
  for (const auto& spec : layout().params())
    if (first >= spec.offset && first < spec.offset + spec.numel)
      return fmt::format("{} (element {})", spec.name, first - spec.offset);
  return fmt::format("flat element {}", first);
}

double ShardedLlama::time_step_communication() {
  const auto t = Clock::now();
  const int policy = reshard_policy();
  auto gather = [&](const UnitShard& u, dist::ProcessGroup& g, std::int64_t parts) {
    Tensor full = Tensor::empty({u.padded}, options_.param_dtype);
    const Tensor in = parts == world_ ? compute_shard_.narrow(0, u.local, u.shard)
                                      : Tensor::zeros({u.padded / parts}, options_.param_dtype);
    g.all_gather_single(full, in);
  };
  for (const UnitShard& u : units_) gather(u, *pg_, world_);  // forward
  // backward: the last block is still gathered from forward
  for (std::size_t i = units_.size() - 1; i-- > 1;) {
    if (policy == world_) gather(units_[i], *pg_, world_);
    else if (policy > 1) gather(units_[i], *k_group_, policy);
  }
  dist::ProcessGroup& rs = rs_group_ ? *rs_group_ : *pg_;
  for (std::size_t i = units_.size(); i-- > 0;) {
    Tensor in = Tensor::zeros({units_[i].padded}, options_.reduce_dtype);
    Tensor out = Tensor::empty({units_[i].shard}, options_.reduce_dtype);
    rs.reduce_scatter_single(out, in, {.op = dist::ReduceOp::avg});
  }
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void ShardedLlama::abort_own_groups() {
  if (rs_group_) rs_group_->abort();
  if (k_group_) k_group_->abort();
}

CommStats ShardedLlama::comm_stats() const { return access_->stats_; }
void ShardedLlama::reset_comm_stats() {
  const std::size_t now = access_->stats_.unsharded_bytes;
  access_->stats_ = CommStats{};
  access_->stats_.unsharded_bytes = access_->stats_.peak_unsharded_bytes = now;
}

std::size_t ShardedLlama::peak_unsharded_bytes() const { return access_->stats_.peak_unsharded_bytes; }

std::size_t ShardedLlama::shard_bytes() const {
  return params_.nbytes() + grads_.nbytes() + (options_.param_dtype == DType::f32 ? 0 : compute_shard_.nbytes());
}

}  // namespace lmcore::fsdp
