// Elastic sharded training: the controller behind `lmcore train --fsdp --elastic`.
//
// Life of a job (store keys under "<group name>-elastic/"):
//  1. start(): the first ranks form the group of LMCORE_WORLD_SIZE, check that they run the same job and
//     that every world size from --min-ranks up keeps the global batch, and rank 0 sets "formed". A
//     process that finds "formed" was restarted: it adds 1 to "want" and waits in ProcessGroup::join().
//  2. begin() / boundary(): at every checkpoint boundary (after the step's disk checkpoint, if any) the
//     memory snapshot is taken when due (below), then rank 0 reads "want" and all ranks agree on it; if
//     restarted ranks wait, every member calls reconfigure() and the new group rebuilds from the live
//     state (it equals the checkpoint just taken).
//  3. recover(): a DistError in a step makes each survivor abort its engine's own groups, shrink() the
//     main group (again if a survivor fails meanwhile) and rebuild from the newest state the survivors
//     can restore: the memory snapshot when every old shard is held by a survivor (its own or a
//     neighbour's replica) and it is no older than the newest disk checkpoint, else that checkpoint, else
//     the run's initial state.
//  rebuild() is one collective sequence run by every rank of the new group, members and joiners alike:
//     (a) all_gather what each rank holds; (b) decide the source, the same way everywhere; (c) build the
//     engine on the new group (its separate reduce-scatter group gets a name of this generation);
//     (d) re-shard (one all_to_all_single; pieces that stay on a rank are copied in place) or read the
//     disk checkpoint; (e) broadcast the state from a rank that has it; (g) stop with a checkpoint
//     below --min-ranks. The new group's first memory snapshot waits for the next boundary (it would
//     cost as long as the re-sharding again); until then the previous snapshot, in the old layout,
//     still covers the restored state: it fails over to disk only if a lost rank's own shard and its
//     replica are both gone.
//
// Memory snapshots (two-phase, so that a failure in the middle never leaves a torn one):
//  (1) every rank sends its live shards (parameters, exp_avg, exp_avg_sq) to its left neighbour and
//      receives its right neighbour's into "pending" (three all_to_all_single);
//  (2) barrier: a rank passes it only when every rank has finished (1);
//  (3) commit: own = a copy of the live shards, replica <-> pending.
//  If a failure hits between (2) and (3) on some ranks, a survivor that committed proves that all
//  finished (1): the others promote their pending replica and their live shards (unchanged since) in
//  recovery, so all restore the same step.
#include "src/train/elastic.h"

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "lmcore/core/fault_injection.h"
#include "lmcore/train/checkpoint.h"

namespace lmcore::train::detail {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double unix_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
}

// How long survivors wait for each other in shrink()/reconfigure(): a live rank on a loaded machine
// must arrive within it, or it is left out (it then rejoins as a restarted rank would).
constexpr std::chrono::milliseconds kWindow{10000};

// Snapshots are ordered by (step, generation): after a change the state of one step is snapshotted
// again by the new group.
std::int64_t snapshot_key(std::int64_t step, int generation) { return step * 65536 + generation; }

const char* kind_name(dist::DistErrorKind k) {
  switch (k) {
    case dist::DistErrorKind::mismatch: return "mismatch";
    case dist::DistErrorKind::timeout: return "timeout";
    case dist::DistErrorKind::peer_failure: return "peer_failure";
    case dist::DistErrorKind::aborted: return "aborted";
    case dist::DistErrorKind::broken: return "broken";
  }
  return "unknown";
}

std::string detection_text(const dist::DistError& e) {
  std::string how;
  switch (e.kind()) {
    case dist::DistErrorKind::peer_failure: how = "a connection to a peer broke"; break;
    case dist::DistErrorKind::timeout: how = "the collective timed out"; break;
    case dist::DistErrorKind::broken: how = "the group was already broken"; break;
    case dist::DistErrorKind::aborted: how = "the group was aborted"; break;
    case dist::DistErrorKind::mismatch: how = "the ranks called different collectives"; break;
  }
  if (!e.missing_ranks().empty()) how += fmt::format("; roll call: rank(s) {} did not answer", fmt::join(e.missing_ranks(), ", "));
  return how;
}

std::vector<std::int64_t> unit_sizes(const model::ModelConfig& c) {
  const model::ParameterLayout layout(c);
  std::vector<std::int64_t> out;
  for (const auto& u : layout.units()) out.push_back(u.numel);
  return out;
}

std::int64_t all_reduce_max(dist::ProcessGroup& pg, std::int64_t v) {
  Tensor t = Tensor::empty({1}, DType::i64);
  t.data<std::int64_t>()[0] = v;
  pg.all_reduce(t, {.op = dist::ReduceOp::max});
  return t.data<std::int64_t>()[0];
}

}  // namespace

// ---- the engine the loop holds ----

namespace {
class ElasticEngine final : public Engine {
 public:
  explicit ElasticEngine(Elastic& el) : el_(el) {}
  int rank() const override { return cur().rank(); }
  int world_size() const override { return cur().world_size(); }
  const model::ModelConfig& config() const override { return cur().config(); }
  double flops_per_micro_batch() const override { return cur().flops_per_micro_batch(); }
  void init(std::uint64_t seed) override { el_.current().init(seed); }
  TrainState load(const std::string& dir) override { return el_.current().load(dir); }
  std::string save(const std::string& parent, const TrainState& state, const std::string& tokenizer) override {
    return el_.current().save(parent, state, tokenizer);
  }
  void zero_grad() override { el_.current().zero_grad(); }
  double micro_step(const std::int32_t* x, const std::int32_t* y, float grad_scale, bool last) override {
    return el_.current().micro_step(x, y, grad_scale, last);
  }
  double eval_loss(const std::int32_t* x, const std::int32_t* y) override { return el_.current().eval_loss(x, y); }
  double grad_norm() override { return el_.current().grad_norm(); }
  std::string first_nonfinite_gradient() override { return el_.current().first_nonfinite_gradient(); }
  void clip(double norm, double max_norm) override { el_.current().clip(norm, max_norm); }
  void optimizer_step(double lr) override { el_.current().optimizer_step(lr); }
  double max_over_ranks(double v) override { return el_.current().max_over_ranks(v); }
  std::size_t state_bytes() const override { return cur().state_bytes(); }
  std::size_t peak_unsharded_bytes() const override { return cur().peak_unsharded_bytes(); }
  fsdp::CommStats comm_stats() const override { return cur().comm_stats(); }
  double time_step_communication() override { return el_.current().time_step_communication(); }

 private:
  const FsdpEngine& cur() const { return el_.current(); }
  Elastic& el_;
};
}  // namespace

// ---- memory snapshots ----

struct Elastic::Snapshot {
  // Committed: the state of `step` in the group of `generation`, where this rank was `pos` of `world`.
  std::int64_t key = -1;
  int pos = -1, world = 0;
  TrainState state;
  std::int64_t adamw_steps = 0;
  Tensor own, replica;  // f32 [3 L]: params | exp_avg | exp_avg_sq (replica: of rank pos + 1)
  // In progress (phase 1 passed or not).
  std::int64_t p_key = -1;
  int p_pos = -1, p_world = 0, p_generation = -1;
  TrainState p_state;
  std::int64_t p_adamw = 0;
  Tensor pending;
};

namespace {
// The engine's live shards of kind k (0 params, 1 exp_avg, 2 exp_avg_sq).
Tensor& live(FsdpEngine& e, int k) {
  return k == 0 ? e.sharded().params() : (k == 1 ? e.optimizer().exp_avg() : e.optimizer().exp_avg_sq());
}
void pack_live(FsdpEngine& e, Tensor& into) {
  const std::int64_t n = e.sharded().params().numel();
  if (!into.defined() || into.numel() != 3 * n) into = Tensor::empty({3 * n}, DType::f32);
  for (int k = 0; k < 3; ++k) into.narrow(0, k * n, n).copy_(live(e, k));
}
}  // namespace

void Elastic::snapshot(const TrainState& state) {
  FsdpEngine& e = *engine_;
  dist::ProcessGroup& pg = *pg_;
  const int w = pg.world_size(), r = pg.rank();
  const std::int64_t n = e.sharded().params().numel();
  if (!snap_) snap_ = std::make_unique<Snapshot>();
  Snapshot& s = *snap_;
  s.p_key = snapshot_key(state.step, pg.generation());
  s.p_pos = r;
  s.p_world = w;
  s.p_generation = pg.generation();
  s.p_state = state;
  s.p_adamw = e.optimizer().steps();
  if (!s.pending.defined() || s.pending.numel() != 3 * n) s.pending = Tensor::zeros({3 * n}, DType::f32);
  // (1) Live shards to the left neighbour, the right neighbour's into pending.
  if (w > 1) {
    dist::AllToAllOptions a;
    a.input_split_sizes.assign(static_cast<std::size_t>(w), 0);
    a.output_split_sizes.assign(static_cast<std::size_t>(w), 0);
    a.input_split_sizes[static_cast<std::size_t>((r + w - 1) % w)] = n;
    a.output_split_sizes[static_cast<std::size_t>((r + 1) % w)] = n;
    for (int k = 0; k < 3; ++k) {
      Tensor out = s.pending.narrow(0, k * n, n);
      pg.all_to_all_single(out, live(e, k), a);
    }
    fault_point("elastic.snapshot");
    // (2) Nobody commits before everybody received.
    pg.barrier();
  }
  // (3) Commit.
  pack_live(e, s.own);
  std::swap(s.replica, s.pending);
  s.key = s.p_key;
  s.pos = s.p_pos;
  s.world = s.p_world;
  s.state = s.p_state;
  s.adamw_steps = s.p_adamw;
  s.p_key = -1;
}

// ---- set-up ----

Elastic::Elastic(Setup setup) : s_(std::move(setup)) {}
Elastic::~Elastic() = default;

std::unique_ptr<Engine> Elastic::make_engine() { return std::make_unique<ElasticEngine>(*this); }

bool Elastic::is_boundary(std::int64_t step) const {
  const TrainOptions& o = s_.options;
  return (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) ||
         (o.memory_checkpoint_every > 0 && step % o.memory_checkpoint_every == 0);
}

std::unique_ptr<FsdpEngine> Elastic::build_engine(dist::ProcessGroup& pg) {
  fsdp::FsdpOptions fo = s_.fsdp;
  // The extra groups of each generation meet under their own names.
  if (pg.generation() > 0) fo.group_options.name = fmt::format("{}-g{}", s_.fsdp.group_options.name, pg.generation());
  const int k = fo.reshard_after_forward, w = pg.world_size();
  if (k > 1 && k < w && w % k != 0) fo.reshard_after_forward = -1;  // k no longer divides the world: free all
  return std::make_unique<FsdpEngine>(s_.config, s_.model_options, s_.adamw, pg, fo);
}

void Elastic::check_fingerprints(dist::ProcessGroup& pg) {
  Tensor mine = Tensor::empty({1}, DType::i64);
  mine.data<std::int64_t>()[0] = static_cast<std::int64_t>(s_.fingerprint >> 1);
  Tensor all = Tensor::empty({pg.world_size()}, DType::i64);
  pg.all_gather_single(all, mine);
  for (int r = 0; r < pg.world_size(); ++r)
    LMCORE_CHECK(all.data<std::int64_t>()[r] == all.data<std::int64_t>()[0],
                 "rank {}: the ranks disagree on the model config or the data: rank {} has a different config, data "
                 "pattern, batch, sequence length, seed or dtype than rank 0; every rank must be started with the same "
                 "arguments",
                 pg.rank(), r);
}

std::optional<Resume> Elastic::start() {
  const TrainOptions& o = s_.options;
  dist::GroupOptions go = s_.fsdp.group_options;
  std::string url = go.store_url;
  if (url.empty() && std::getenv("LMCORE_STORE")) url = std::getenv("LMCORE_STORE");
  LMCORE_CHECK(!url.empty(), "--elastic needs the store of the job (LMCORE_STORE, set by `lmcore launch`)");
  store_ = dist::prefix_store(dist::open_store(url), go.name + "-elastic/");
  if (store_->check({"formed"})) return join();

  pg_ = std::make_unique<dist::ProcessGroup>(go);
  initial_world_ = pg_->world_size();
  check_fingerprints(*pg_);
  global_batch_ = o.global_batch > 0 ? o.global_batch : o.batch_size * initial_world_ * o.grad_accum;
  // Every world size the job may shrink to must keep the global batch: say so now, not after a failure.
  std::vector<int> bad;
  for (int w = std::max(1, o.min_ranks); w <= initial_world_; ++w)
    if (global_batch_ % (o.batch_size * w) != 0) bad.push_back(w);
  if (!bad.empty()) {
    std::int64_t lcm = o.batch_size;
    for (int w = std::max(1, o.min_ranks); w <= initial_world_; ++w) lcm = std::lcm(lcm, o.batch_size * w);
    fail("--elastic: the global batch {} (sequences per step) is not a multiple of --batch-size {} x W for W = {}, "
         "so a job shrunk to that many ranks could not keep it; use --global-batch {} (or a multiple), or raise "
         "--min-ranks (now {})",
         global_batch_, o.batch_size, fmt::join(bad, ", "), lcm, o.min_ranks);
  }
  engine_ = build_engine(*pg_);
  if (pg_->rank() == 0) store_->set("formed", "1");
  return std::nullopt;
}

void Elastic::begin(const TrainState& state) {
  if (s_.options.memory_checkpoint_every > 0) snapshot(state);
}

void Elastic::finish() {
  if (pg_ && pg_->rank() == 0 && store_) {
    try {
      store_->set("finished", "1");
    } catch (const std::exception&) {
    }
  }
}

// ---- joining ----

Resume Elastic::join() {
  const auto t0 = Clock::now();
  LMCORE_CHECK(!store_->check({"finished"}), "elastic: the job this rank was restarted for has already finished");
  store_->add("want", 1);
  // join() blocks until a member's reconfigure() admits this process; the job may end meanwhile, so
  // the wait runs on its own thread while this one watches for "finished".
  auto result = std::make_shared<std::promise<dist::ProcessGroup>>();
  std::future<dist::ProcessGroup> fut = result->get_future();
  dist::GroupOptions go = s_.fsdp.group_options;
  std::thread([go, result] {
    try {
      result->set_value(dist::ProcessGroup::join(go, std::chrono::hours(24)));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    bool finished = false;
    try {
      finished = store_->check({"finished"});
    } catch (const std::exception&) {
    }
    LMCORE_CHECK(!finished, "elastic: the job finished before this restarted rank was admitted");
  }
  auto next = std::make_unique<dist::ProcessGroup>(fut.get());
  json ev = {{"cause", "join"}, {"waited_s", seconds_since(t0)}};
  return rebuild(std::move(next), false, nullptr, ev, t0);
}

std::optional<Resume> Elastic::boundary(const TrainState& state) {
  if (!is_boundary(state.step)) return std::nullopt;
  if (s_.options.memory_checkpoint_every > 0 && state.step % s_.options.memory_checkpoint_every == 0) snapshot(state);
  const std::int64_t want = all_reduce_max(*pg_, pg_->rank() == 0 ? store_->add("want", 0) : 0);
  if (want <= joins_handled_) return std::nullopt;
  const auto t0 = Clock::now();
  const int n = static_cast<int>(want - joins_handled_);
  joins_handled_ = want;
  retired_.push_back(std::move(pg_));
  auto next = std::make_unique<dist::ProcessGroup>(retired_.back()->reconfigure({.window = kWindow, .min_joiners = n}));
  json ev = {{"cause", "join"}};
  return rebuild(std::move(next), false, &state, ev, t0);
}

// ---- recovery ----

Resume Elastic::recover(const dist::DistError& error, std::int64_t failed_step, double since_step_start,
                        double since_last_step) {
  const auto t0 = Clock::now();
  const int old_world = pg_->world_size();
  json ev = {{"cause", "failure"},
             {"at_step", failed_step},
             {"op", error.op()},
             {"seq", error.seq()},
             {"kind", kind_name(error.kind())},
             {"missing_ranks", error.missing_ranks()},
             {"detection", detection_text(error)},
             {"detect_s", since_step_start},
             {"since_last_step_s", since_last_step}};
  std::fprintf(stderr, "lmcore train: rank %d of %d: a collective failed after %lld completed steps (%s): shrinking to "
               "the survivors\n",
               pg_->rank(), old_world, static_cast<long long>(failed_step), error.what());
  retired_.push_back(std::move(pg_));
  for (int attempt = 1;; ++attempt) {
    if (engine_) engine_->sharded().abort_own_groups();
    dist::ProcessGroup& failed = *retired_.back();
    std::unique_ptr<dist::ProcessGroup> next;
    try {
      next = std::make_unique<dist::ProcessGroup>(failed.shrink({.window = kWindow}));
    } catch (const dist::DistError& e) {
      LMCORE_CHECK(e.kind() == dist::DistErrorKind::broken,
                   "elastic: rank {} could not agree with the survivors on a new group after a failure at step {}: {}",
                   failed.rank(), failed_step, e.what());
      // Left out (this rank arrived after the survivors decided): its state is of no use any more; it
      // comes back as a restarted rank would.
      std::fprintf(stderr, "lmcore train: %s; rejoining as a restarted rank\n", e.what());
      engine_.reset();
      snap_.reset();
      retired_.clear();
      Resume r = join();
      r.event["left_out"] = true;
      return r;
    } catch (const std::exception& e) {
      fail("elastic: rank {} could not agree with the survivors on a new group after a failure at step {}: {}",
           failed.rank(), failed_step, e.what());
    }
    try {
      Resume r = rebuild(std::move(next), true, nullptr, ev, t0);
      r.event["attempts"] = attempt;
      r.event["downtime_s"] = since_last_step + seconds_since(t0);
      return r;
    } catch (const dist::DistError& again) {
      // Another rank failed while recovering: shrink the group that was being built.
      std::fprintf(stderr, "lmcore train: recovery attempt %d failed (%s); shrinking again\n", attempt, again.what());
      retired_.push_back(std::move(pg_));
      ev["op"] = again.op();
      ev["detection"] = detection_text(again) + " (during recovery)";
    }
  }
}

// ---- deciding the source ----

SourceDecision decide_source(const std::vector<RankHolding>& ranks, bool after_failure, std::int64_t disk_step) {
  const int world = static_cast<int>(ranks.size());
  SourceDecision d;
  d.promote.assign(static_cast<std::size_t>(world), false);
  if (!after_failure) {
    for (const RankHolding& h : ranks) d.source_world = std::max(d.source_world, h.prev_world);
    d.providers.assign(static_cast<std::size_t>(d.source_world), {});
    for (int r = 0; r < world; ++r)
      if (ranks[r].prev_pos >= 0 && ranks[r].prev_pos < d.source_world) d.providers[ranks[r].prev_pos] = {r, false};
    for (const Provider& p : d.providers) d.member_lost = d.member_lost || p.new_rank < 0;
    if (!d.member_lost) return d;  // live, root 0 (members come first in the new group)
  }
  std::int64_t key = -1;
  for (const RankHolding& h : ranks) key = std::max(key, h.snap_key);
  bool memory_ok = key >= 0;
  std::vector<bool> promote(static_cast<std::size_t>(world), false);
  std::vector<Provider> providers;
  int source_world = 0, root = 0;
  if (memory_ok) {
    std::vector<int> pos(static_cast<std::size_t>(world), -1);
    for (int r = 0; r < world; ++r) {
      const RankHolding& h = ranks[r];
      if (h.snap_key == key) {
        pos[r] = h.snap_pos;
        source_world = h.snap_world;
      } else if (h.pend_key == key) {
        pos[r] = h.pend_pos;
        source_world = h.pend_world;
        promote[r] = true;
      }
    }
    providers.assign(static_cast<std::size_t>(source_world), {});
    for (int o = 0; o < source_world && memory_ok; ++o) {
      for (int r = 0; r < world; ++r)
        if (pos[r] == o) providers[o] = {r, false};
      const int left = (o + source_world - 1) % source_world;
      if (providers[o].new_rank < 0 && source_world > 1)
        for (int r = 0; r < world; ++r)
          if (pos[r] == left) providers[o] = {r, true};
      memory_ok = providers[o].new_rank >= 0;
    }
    for (int r = world - 1; r >= 0; --r)
      if (pos[r] >= 0) root = r;
    d.memory_step = key / 65536;
    d.memory_lost = !memory_ok;
  }
  if (memory_ok && d.memory_step >= disk_step) {
    d.source = RestoreSource::memory;
    d.source_world = source_world;
    d.providers = providers;
    d.promote = promote;
    d.root = root;
  } else {
    d.source = disk_step >= 0 ? RestoreSource::disk : RestoreSource::initial;
    d.source_world = 0;
    d.providers.clear();
    d.root = 0;
  }
  return d;
}

// ---- rebuilding on a new group ----

namespace {
// What each rank holds, exchanged at the start of rebuild().
enum Info : int {
  kSnapKey, kSnapPos, kSnapWorld,   // committed memory snapshot (-1 / -1 / 0 when none)
  kPendKey, kPendPos, kPendWorld,   // a snapshot this rank can still promote (-1 when none)
  kFingerprint,
  kDiskStep,                        // newest complete disk checkpoint (rank 0's view), -1 when none
  kPrevPos, kPrevWorld,             // this rank's place in the previous group (-1 / 0: restarted)
  kGlobalBatch, kJoinsHandled,
  kInfoCount
};
}  // namespace

Resume Elastic::rebuild(std::unique_ptr<dist::ProcessGroup> next, bool after_failure, const TrainState* live_state,
                        json event, Clock::time_point t0) {
  const auto t_group = Clock::now();
  event["group_s"] = std::chrono::duration<double>(t_group - t0).count();  // shrink / reconfigure / join
  pg_ = std::move(next);
  dist::ProcessGroup& pg = *pg_;
  const int me = pg.rank(), world = pg.world_size();
  const TrainOptions& o = s_.options;
  const std::vector<std::int64_t> units = unit_sizes(s_.config);

  // (a) What every rank holds.
  std::vector<std::int64_t> mine(kInfoCount, -1);
  if (snap_ && snap_->key >= 0) {
    mine[kSnapKey] = snap_->key;
    mine[kSnapPos] = snap_->pos;
    mine[kSnapWorld] = snap_->world;
  }
  // A snapshot that stopped after phase 1 can be promoted only with the live shards it was taken of.
  if (snap_ && snap_->p_key >= 0 && engine_ && engine_->sharded().group().generation() == snap_->p_generation) {
    mine[kPendKey] = snap_->p_key;
    mine[kPendPos] = snap_->p_pos;
    mine[kPendWorld] = snap_->p_world;
  }
  mine[kFingerprint] = static_cast<std::int64_t>(s_.fingerprint >> 1);
  if (me == 0) {
    const auto all = list_checkpoints(s_.checkpoints);
    mine[kDiskStep] = all.empty() ? -1 : CheckpointReader(all.back()).state().step;
  }
  if (engine_) {
    mine[kPrevPos] = engine_->rank();
    mine[kPrevWorld] = engine_->world_size();
  } else {
    mine[kPrevWorld] = 0;
  }
  mine[kGlobalBatch] = global_batch_;
  mine[kJoinsHandled] = joins_handled_;
  Tensor in = Tensor::from_vector(mine, {kInfoCount});
  Tensor all = Tensor::empty({static_cast<std::int64_t>(world) * kInfoCount}, DType::i64);
  pg.all_gather_single(all, in);
  auto info = [&](int r, Info f) { return all.data<std::int64_t>()[r * kInfoCount + f]; };
  for (int r = 0; r < world; ++r)
    LMCORE_CHECK(info(r, kFingerprint) == info(0, kFingerprint),
                 "elastic: rank {} of the new group runs a different model config, data, batch, sequence length, seed "
                 "or dtype than rank 0; a restarted rank must be started with the same arguments",
                 r);
  for (int r = 0; r < world; ++r) {
    global_batch_ = std::max(global_batch_, info(r, kGlobalBatch));
    joins_handled_ = std::max(joins_handled_, info(r, kJoinsHandled));
  }
  int joined = 0;
  std::vector<int> survivors_prev;  // previous-group positions present
  int prev_world = 0;
  for (int r = 0; r < world; ++r) {
    if (info(r, kPrevPos) < 0) ++joined;
    else survivors_prev.push_back(static_cast<int>(info(r, kPrevPos)));
    prev_world = std::max<int>(prev_world, static_cast<int>(info(r, kPrevWorld)));
  }

  // (b) The source, decided the same way on every rank.
  std::vector<RankHolding> holding(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    RankHolding& h = holding[static_cast<std::size_t>(r)];
    h.snap_key = info(r, kSnapKey);
    h.snap_pos = static_cast<int>(info(r, kSnapPos));
    h.snap_world = static_cast<int>(info(r, kSnapWorld));
    h.pend_key = info(r, kPendKey);
    h.pend_pos = static_cast<int>(info(r, kPendPos));
    h.pend_world = static_cast<int>(info(r, kPendWorld));
    h.prev_pos = static_cast<int>(info(r, kPrevPos));
    h.prev_world = static_cast<int>(info(r, kPrevWorld));
  }
  const std::int64_t disk_step = info(0, kDiskStep);
  const SourceDecision d = decide_source(holding, after_failure, disk_step);
  const RestoreSource source = d.source;
  const std::vector<Provider>& providers = d.providers;
  const int source_world = d.source_world, root = d.root;
  const std::int64_t memory_step = d.memory_step;
  after_failure = after_failure || d.member_lost;
  if (d.member_lost) event["member_lost_while_admitting"] = true;
  if (d.memory_lost) event["memory_snapshot_lost"] = "a lost rank's shard and its replica (its left neighbour) are both gone";
  const std::string disk_path =
      source == RestoreSource::disk ? (fs::path(s_.checkpoints) / fmt::format("step_{:08}", disk_step)).string() : "";

  // (c) The new engine. The previous one is kept while its live shards are the source.
  if (d.promote[static_cast<std::size_t>(me)]) {
    // Phase 3 of the interrupted snapshot, now: the live shards did not change since phase 1.
    Snapshot& s = *snap_;
    pack_live(*engine_, s.own);
    std::swap(s.replica, s.pending);
    s.key = s.p_key, s.pos = s.p_pos, s.world = s.p_world, s.state = s.p_state, s.adamw_steps = s.p_adamw;
    s.p_key = -1;
  }
  std::unique_ptr<FsdpEngine> old_engine = std::move(engine_);
  if (source != RestoreSource::live) {
    old_engine.reset();
    retired_.clear();
  }
  engine_ = build_engine(pg);
  FsdpEngine& e = *engine_;

  // (d) Fill it.
  TrainState state;
  std::int64_t adamw_steps = 0;
  std::string source_text;
  if (source == RestoreSource::live || source == RestoreSource::memory) {
    float* dst[3] = {e.sharded().params().data<float>(), e.optimizer().exp_avg().data<float>(),
                     e.optimizer().exp_avg_sq().data<float>()};
    const std::int64_t src_len = local_offsets(units, source_world).back();
    auto from = [&](int old_rank, int k) -> const float* {
      if (source == RestoreSource::live) return live(*old_engine, k).data<float>();
      const Provider& p = providers[static_cast<std::size_t>(old_rank)];
      return (p.replica ? snap_->replica : snap_->own).data<float>() + k * src_len;
    };
    redistribute(pg, units, source_world, providers, from, dst);
    if (source == RestoreSource::live) {
      if (live_state) state = *live_state;
      adamw_steps = old_engine ? old_engine->optimizer().steps() : 0;
      source_text = fmt::format("live state at step {} (checkpoint boundary)", live_state ? live_state->step : -1);
    } else {
      if (snap_ && snap_->key >= 0) state = snap_->state, adamw_steps = snap_->adamw_steps;
      source_text = fmt::format("memory snapshot of step {}", memory_step);
    }
    e.sharded().params_updated();
  } else if (source == RestoreSource::disk) {
    state = e.load(disk_path);
    adamw_steps = e.optimizer().steps();
    source_text = "disk checkpoint " + disk_path;
  } else {
    if (!s_.resume_dir.empty()) {
      state = e.load(s_.resume_dir);
      adamw_steps = e.optimizer().steps();
      source_text = "the run's starting checkpoint " + s_.resume_dir;
    } else {
      e.init(o.seed);
      state.step = 0;
      state.seed = o.seed;
      source_text = "the initial weights (no checkpoint yet)";
    }
  }
  old_engine.reset();
  retired_.clear();

  // (e) Everyone continues from the root's state.
  {
    std::vector<std::int64_t> v = {state.step, state.data.epoch, state.data.cursor, static_cast<std::int64_t>(state.seed),
                                   adamw_steps};
    Tensor t = Tensor::from_vector(v, {5});
    pg.broadcast(t, root);
    const std::int64_t* p = t.data<std::int64_t>();
    state.step = p[0];
    state.data = {p[1], p[2]};
    state.seed = static_cast<std::uint64_t>(p[3]);
    e.optimizer().set_steps(p[4]);
  }

  event["step"] = state.step;
  event["old_world"] = prev_world > 0 ? prev_world : world - joined;
  event["new_world"] = world;
  event["generation"] = pg.generation();
  event["joined"] = joined;
  if (after_failure) {
    std::vector<int> lost;
    for (int r = 0; r < prev_world; ++r)
      if (std::find(survivors_prev.begin(), survivors_prev.end(), r) == survivors_prev.end()) lost.push_back(r);
    event["lost_ranks"] = lost;
  }
  event["source"] = source_text;
  event["label"] = fmt::format("{}\u2192{} ranks", event["old_world"].get<int>(), world);

  // (g) Below --min-ranks, or a world that cannot keep the global batch: stop with a checkpoint.
  std::string stop;
  if (world < o.min_ranks)
    stop = fmt::format("{} rank(s) left, fewer than --min-ranks {}", world, o.min_ranks);
  else if (global_batch_ % (o.batch_size * world) != 0)
    stop = fmt::format("the global batch {} is not a multiple of --batch-size {} x {} ranks", global_batch_, o.batch_size,
                       world);
  if (!stop.empty()) {
    std::string saved = disk_path;
    if (source != RestoreSource::disk) saved = e.save(s_.checkpoints, state, o.tokenizer);
    fail("elastic: stopping at step {}: {}; consistent checkpoint: {} (resume with --resume)", state.step, stop, saved);
  }

  event["restore_s"] = seconds_since(t_group);  // agree, build the engine, re-shard or read, share the state
  event["recover_s"] = seconds_since(t0);
  event["unix_time"] = unix_now();
  return {state, event};
}

}  // namespace lmcore::train::detail
