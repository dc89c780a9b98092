// lmcore/fsdp/sharded_model.h — fully sharded data parallelism (FSDP2-style) for the Llama model.
//
// Every sharding unit of the model (ParameterLayout: the root, then one per transformer block) is a
// flat run of parameters padded to a multiple of the world size W and cut into W equal shards; rank r
// keeps shard r of every unit's f32 parameters, f32 gradients and AdamW state, so their memory per
// rank falls as 1/W. Around the model's use of a unit (model::UnitAccess):
//
//   forward   all_gather_single of the unit's shards (in param_dtype) before it runs, with the next
//             `prefetch` units' all-gathers already issued; after it ran, its full parameters are
//             freed (reshard_after_forward = W, the default), kept (0: ZeRO-2 style) or kept as 1/k
//             (k dividing W: backward then all-gathers within groups of k consecutive ranks); the
//             last block, which backward uses first, stays gathered until then;
//   backward  all-gathers again in reverse order, with prefetch; each unit's gradients leave through
//             reduce_scatter_single (average over ranks, in reduce_dtype) as soon as its backward is
//             done, on a second process group when separate_reduce_scatter_group is set (its own
//             connections and progress thread, so it overlaps the all-gathers; without prefetch it
//             gives way to them on the link, ProcessGroup::give_way_to, so that the all-gather that
//             compute waits for is not slowed by the reduce-scatter issued just before it, which on
//             one group it waits behind).
// The root unit (embedding, final norm, head) stays gathered through a micro-batch.
//
//   dist::ProcessGroup pg = dist::ProcessGroup::from_env();
//   ShardedLlama m(config, {.batch = B / W, .seq_len = T}, pg, {.prefetch = 1});
//   m.init_weights(seed);                     // each rank initialises only its shard
//   m.forward_backward(x_local, y_local, 1.0f);
//   double norm = m.grad_norm();              // one all_reduce of the squared norms
//   opt.step(m.params().data<float>(), m.grads().data<float>(), lr);  // train::AdamW(layout, {}, m.pieces())
//   m.params_updated();
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "lmcore/dist/process_group.h"
#include "lmcore/model/llama.h"

namespace lmcore::fsdp {

struct FsdpOptions {
  // After forward: W (or -1) frees the full parameters, 0 keeps them, k (1 < k < W, dividing W) keeps
  // 1/k of them and all-gathers within groups of k ranks in backward.
  int reshard_after_forward = -1;
  int prefetch = 1;  // units whose all-gather is issued ahead of use (0: none)
  // Reduce-scatters on a group of their own (without prefetch it gives way to the all-gathers: above).
  bool separate_reduce_scatter_group = false;
  DType param_dtype = DType::f32;   // all-gathered and computed in this dtype (f32 or bf16)
  DType reduce_dtype = DType::f32;  // gradients reduce-scattered in this dtype (f32 or bf16)
  // How the extra groups (reduce-scatter, reshard-to-k) find each other: the main group's options.
  dist::GroupOptions group_options;
};

// The options of the groups that sharded training talks over: `base` with every collective on the
// direct algorithms (each block straight to the rank that needs it: no ring hops, each of which waits
// on a thread wake-up) and the payload kept out of the header messages (gathered blocks land straight
// in the unsharded parameters, gradients leave straight from their buffer, instead of a copy into
// and one out of a message). A step's collectives are few, large and bound by bandwidth, and those
// copies and wake-ups take CPU from the compute they overlap with. The direct reduce-scatter receives
// every rank's part of a unit: one unit's worth of receive buffer per group. Independent of the
// model, so that ranks started with different configs still meet in the start-up check. The
// trainer's group and the ones ShardedLlama makes from FsdpOptions::group_options use it.
dist::GroupOptions group_options_for_sharding(dist::GroupOptions base = {});

// One unit's place in the shards.
struct UnitShard {
  std::int64_t offset = 0, numel = 0;  // the unit in the flat layout
  std::int64_t padded = 0;             // numel rounded up to a multiple of the world size
  std::int64_t shard = 0;              // padded / world size
  std::int64_t local = 0;              // where this rank's shard starts in the local buffers
};

// Time a rank spent waiting on collectives (communication not hidden behind compute).
struct CommStats {
  double gather_wait_s = 0, reduce_wait_s = 0;
  std::int64_t gathers = 0, reduce_scatters = 0;
  // Unsharded buffers (gathered parameters, full gradients, reduce-scatter buffers) alive at once, now
  // and at most since construction.
  std::size_t unsharded_bytes = 0, peak_unsharded_bytes = 0;
};

class ShardedLlama {
 public:
  ShardedLlama(const model::ModelConfig& config, const model::ModelOptions& options, dist::ProcessGroup& pg,
               const FsdpOptions& fsdp);
  ~ShardedLlama();
  ShardedLlama(const ShardedLlama&) = delete;
  ShardedLlama& operator=(const ShardedLlama&) = delete;

  model::Llama& model() { return *model_; }
  const model::Llama& model() const { return *model_; }
  const model::ModelConfig& config() const { return model_->config(); }
  const model::ParameterLayout& layout() const { return model_->layout(); }
  dist::ProcessGroup& group() { return *pg_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  const FsdpOptions& options() const { return options_; }

  // This rank's shards, f32: parameters (the master copy) and gradients, laid out unit after unit.
  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  const std::vector<UnitShard>& units() const { return units_; }
  // The shards as AdamW pieces (global offsets, real lengths, padding).
  std::vector<model::ShardPiece> pieces() const;

  void init_weights(std::uint64_t seed);
  void zero_grad();
  // After the master shard changed (optimizer step, load): refreshes the param_dtype shard.
  void params_updated();
  // false for all micro-batches but the last: gradients stay unsharded and local, and are reduce-scattered
  // once (FSDP2's set_requires_gradient_sync).
  void set_requires_gradient_sync(bool sync) { sync_ = sync; }

  // tokens/targets: this rank's (batch, seq_len) rows. Gradients ADD into grads() (after the reduce-scatter,
  // averaged over the ranks).
  model::StepLoss forward_backward(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale);
  model::StepLoss forward_loss(const std::int32_t* tokens, const std::int32_t* targets);

  // Global L2 norm of the gradients over all shards (one all_reduce).
  double grad_norm();
  // The first parameter (by layout order) with a non-finite gradient on any rank, or "" (one all_reduce).
  std::string first_nonfinite_gradient();

  // The collectives of one training step run back to back with no compute (all-gathers of every unit
  // for forward and, as reshard_after_forward needs them, backward; one reduce-scatter per unit), on the
  // groups they use in training: how long communication takes when nothing hides it. Collective.
  double time_step_communication();

  CommStats comm_stats() const;
  void reset_comm_stats();
  // After a failure of the main group: aborts the groups this model made itself (the separate
  // reduce-scatter group, the reshard-to-k group), so that their calls still queued fail at once and
  // destroying the model does not wait out their timeouts.
  void abort_own_groups();
  // Bytes of this rank's persistent state: parameter, gradient and param_dtype shards.
  std::size_t shard_bytes() const;
  // The most bytes of unsharded parameters and gradients this rank held at once (CommStats).
  std::size_t peak_unsharded_bytes() const;

 private:
  class Access;
  // The effective reshard_after_forward: world_ (free), 0 (keep) or k.
  int reshard_policy() const;
  FsdpOptions options_;
  dist::ProcessGroup* pg_;
  std::unique_ptr<dist::ProcessGroup> rs_group_, k_group_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<model::Llama> model_;
  std::vector<UnitShard> units_;
  Tensor params_, grads_, compute_shard_;
  bool sync_ = true;
  std::unique_ptr<Access> access_;
};

}  // namespace lmcore::fsdp
