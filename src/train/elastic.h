// Private: elastic sharded training (see lmcore/train/elastic.h for the behaviour). The training loop
// asks an Elastic for its engine and calls it at four moments: start-up, after the initial state is
// set, at every checkpoint boundary, and when a step failed with a DistError.
//
// Buffers kept per rank, L = this rank's shard length (all units), in f32 elements:
//   live engine           params, grads, exp_avg, exp_avg_sq                      4 L
//   memory snapshot own   params | exp_avg | exp_avg_sq at the snapshot step      3 L
//   replica               the same three of the right neighbour (rank + 1 mod W)  3 L
//   pending replica       the replica being received by a snapshot in progress    3 L
// (the snapshot buffers only with --memory-checkpoint-every).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmcore/dist/process_group.h"
#include "lmcore/dist/store.h"
#include "lmcore/train/trainer.h"
#include "src/train/engine.h"

namespace lmcore::train::detail {

// ---- moving shards between world sizes (elastic_reshard.cpp) ----

// Who provides old rank o's shards after a change: the rank of the new group that holds them, and
// whether as its own shards or as its replica of o. new_rank -1: nobody (lost).
struct Provider {
  int new_rank = -1;
  bool replica = false;
};

// One run of elements that moves: unit `unit`'s elements [begin, end) (unit-local, real elements
// only, never padding) leave old rank `old_rank`'s shard (provided by new rank `src`) for new rank
// `dst`'s shard.
struct Piece {
  int unit = 0;
  std::int64_t begin = 0, end = 0;
  int old_rank = 0;
  int src = 0, dst = 0;
};

// Every piece, sorted by (dst, src, unit, old_rank): the order in which a sender packs the pieces for
// one destination and the receiver unpacks them. Shards follow fsdp::ShardedLlama: unit u of n
// elements is padded to ceil(n / W) * W and rank r holds [r * ceil(n / W), (r + 1) * ceil(n / W)).
std::vector<Piece> plan_pieces(const std::vector<std::int64_t>& unit_numel, int old_world, int new_world,
                               const std::vector<Provider>& providers);

// Offsets of each unit's shard in a rank's local buffer at world W (prefix sums of ceil(n / W)), plus
// the total at the end.
std::vector<std::int64_t> local_offsets(const std::vector<std::int64_t>& unit_numel, int world);

// Collective over `pg` (the new group, every rank calls it): re-shards three flat states (parameters,
// exp_avg, exp_avg_sq) from old_world to pg.world_size() with one all_to_all_single. source(o, k)
// gives old rank o's kind-k shard (old local layout) on the rank that provides o; dst[k] receives
// this rank's new shard of kind k (new local layout; padding is set to 0).
void redistribute(dist::ProcessGroup& pg, const std::vector<std::int64_t>& unit_numel, int old_world,
                  const std::vector<Provider>& providers, const std::function<const float*(int, int)>& source,
                  float* const dst[3]);

// ---- where a new group's state comes from (decided identically on every rank) ----

enum class RestoreSource : std::uint8_t { live, memory, disk, initial };

// What one rank of the new group reported at the start of the rebuild.
struct RankHolding {
  std::int64_t snap_key = -1;  // committed memory snapshot: step * 65536 + generation, -1 when none
  int snap_pos = -1, snap_world = 0;  // this rank's place in the group that took it
  std::int64_t pend_key = -1;  // a snapshot past its exchange that this rank could still commit
  int pend_pos = -1, pend_world = 0;
  int prev_pos = -1, prev_world = 0;  // place in the previous group (-1: restarted, holds nothing)
};

struct SourceDecision {
  RestoreSource source = RestoreSource::live;
  int source_world = 0;              // the world size of the layout the shards come in (live/memory)
  std::vector<Provider> providers;   // per old rank of that layout (live/memory)
  std::vector<bool> promote;         // per new rank: commit its pending snapshot first (memory)
  int root = 0;                      // a rank that holds the state to continue from
  std::int64_t memory_step = -1;     // the newest memory snapshot all survivors agree on (-1: none)
  bool memory_lost = false;          // a snapshot existed, but a shard and its replica are both gone
  bool member_lost = false;          // at a boundary, a member did not make it into the new group
};

// after_failure false: a checkpoint boundary (the members' live shards are the state), unless a member
// is missing. Otherwise the newest of: the memory snapshot with the highest key that some rank
// committed (ranks holding it only as pending promote it: a committed rank proves every rank finished
// the exchange), if every old shard has a holder (own, or the left neighbour's replica) and it is no
// older than disk_step; the disk checkpoint of disk_step (>= 0); the initial state.
SourceDecision decide_source(const std::vector<RankHolding>& ranks, bool after_failure, std::int64_t disk_step);

// ---- the controller ----

// What the loop continues from after a change of membership, and the event that describes it (the
// lead logs it).
struct Resume {
  TrainState state;
  nlohmann::json event;
};

class Elastic {
 public:
  struct Setup {
    TrainOptions options;  // after defaults (max_steps set, global batch as given)
    model::ModelConfig config;
    model::ModelOptions model_options;
    AdamWOptions adamw;
    fsdp::FsdpOptions fsdp;  // group_options.name is the main group's name
    std::uint64_t fingerprint = 0;  // of the config, data and batch options: ranks must agree
    std::string checkpoints;        // the run's checkpoint folder (disk checkpoints)
    std::string resume_dir;         // the run's initial state when nothing newer exists ("" = seed)
  };
  explicit Elastic(Setup setup);
  ~Elastic();
  Elastic(const Elastic&) = delete;
  Elastic& operator=(const Elastic&) = delete;

  // The engine the loop uses: it forwards to the current sharded engine, which changes with membership.
  std::unique_ptr<Engine> make_engine();
  // Forms the group. A rank of the first start gets nullopt and then sets the initial state and calls
  // begin(); a restarted rank (the job's group already formed) joins, is admitted at the members'
  // next boundary and gets the state to continue from.
  std::optional<Resume> start();
  // The global batch every world size keeps.
  std::int64_t global_batch() const { return global_batch_; }
  // After the initial state was set (collective): the first memory snapshot.
  void begin(const TrainState& state);
  // After step `state.step` completed and its checkpoint (if any) was written (collective): the memory
  // snapshot when due, then waiting restarted ranks are admitted. Returns the resume point when the
  // membership changed.
  std::optional<Resume> boundary(const TrainState& state);
  // A checkpoint boundary: a disk or memory checkpoint is due after this step.
  bool is_boundary(std::int64_t step) const;
  // After a DistError when failed_step steps were complete (in the next step, or in the checkpoint or
  // evaluation after this one): shrink to the survivors (again, if they fail during it), re-shard the newest state they can restore and return
  // it. since_step_start / since_last_step: seconds from the failed step's start and from the end of
  // the last completed step to the error. Throws Error when below min_ranks (after writing a
  // checkpoint) or when this rank cannot continue.
  Resume recover(const dist::DistError& error, std::int64_t failed_step, double since_step_start,
                 double since_last_step);
  // At the end of the run (rank 0 marks it in the store, so that a late restarted rank does not wait).
  void finish();

  FsdpEngine& current() { return *engine_; }

 private:
  struct Snapshot;
  std::unique_ptr<FsdpEngine> build_engine(dist::ProcessGroup& pg);
  void check_fingerprints(dist::ProcessGroup& pg);
  void snapshot(const TrainState& state);
  // The collective sequence every rank of a new group runs (members after shrink/reconfigure, a
  // restarted rank after join): agree on the source, build the engine, re-shard, share the state.
  // `live_state`: at a boundary, the state the members' live shards hold; null after a failure and for
  // a restarted rank. t0: when the change began (for the event's timings).
  Resume rebuild(std::unique_ptr<dist::ProcessGroup> next, bool after_failure, const TrainState* live_state,
                 nlohmann::json event, std::chrono::steady_clock::time_point t0);
  Resume join();

  Setup s_;
  std::shared_ptr<dist::Store> store_;  // this job's elastic keys ("<group name>-elastic/...")
  std::unique_ptr<dist::ProcessGroup> pg_;  // the current group
  // Groups left behind by shrink()/reconfigure() while an engine built on them still exists (its
  // shards are a source, or a recovery failed before they were replaced).
  std::vector<std::unique_ptr<dist::ProcessGroup>> retired_;
  std::unique_ptr<FsdpEngine> engine_;
  std::unique_ptr<Snapshot> snap_;
  std::int64_t global_batch_ = 0;
  std::int64_t joins_handled_ = 0;  // the store's join requests already acted on
  int initial_world_ = 0;
};

}  // namespace lmcore::train::detail
