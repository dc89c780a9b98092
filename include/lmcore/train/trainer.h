// lmcore/train/trainer.h — the training loop behind `lmcore train`.
//
// One optimizer step: zero the gradients; for each of grad_accum micro-batches, forward and backward
// with the loss scaled by 1 / grad_accum; stop on a NaN/Inf loss or gradient (after saving the state
// for inspection under RUN/diverged/); clip the global gradient norm; AdamW with the schedule's lr.
// Every eval_every steps the validation loss, every checkpoint_every steps a checkpoint (atomic; the
// newest keep_checkpoints are kept), and on SIGINT/SIGTERM a checkpoint before returning. The losses of
// a run resumed from a checkpoint are bit-identical to those of the uninterrupted run at the same
// thread count.
//
// The run folder `out` receives checkpoints/, metrics.jsonl (or `log`), report.html and, for the
// built-in default, nothing else (the corpus is cached, see builtin_corpus.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lmcore/core/dtype.h"
#include "lmcore/train/lr_schedule.h"

namespace lmcore::train {

struct TrainOptions {
  std::string config_file;  // model config.json; empty: the built-in default model
  std::string data;         // glob of training shards; empty: the built-in corpus
  std::string val_data;     // glob of validation shards; empty: data with "train" replaced by "val", if any
  std::string tokenizer;    // tokenizer.json copied into checkpoints (for generate); empty: next to the data
  // The run folder. Empty: the resumed run's folder with `resume`, else runs/default, or runs/default-2,
  // -3, ... when it holds an earlier run's checkpoints. A fresh run refuses a folder that holds another
  // run's checkpoints: its own would sort among them, be pruned in their place, and a later --resume
  // would pick the other run's newest.
  std::string out;
  std::int64_t max_steps = 0;  // 0: from time_budget (the built-in default: 120 s), else 1000
  // Seconds the run should take when max_steps is 0: the step count is calibrated by timing one
  // forward/backward before training (the built-in default uses 120).
  double time_budget = 0;
  std::int64_t batch_size = 8;   // sequences per micro-batch on each rank
  std::int64_t seq_len = 256;
  std::int64_t grad_accum = 1;   // micro-batches per optimizer step
  // Sequences per optimizer step over all ranks; 0: batch_size x world size x grad_accum. When set,
  // grad_accum follows from it (it must divide by batch_size x world size).
  std::int64_t global_batch = 0;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  std::int64_t warmup = -1;  // -1: 5% of max_steps (at most 200)
  Schedule schedule = Schedule::cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables
  DType dtype = DType::f32;
  bool recompute = false;
  bool codegen = false;  // generated RMSNorm and MLP kernels (model::ModelOptions::codegen; f32 only)
  // Keep each block's gate|up product for the backward (model::ModelOptions::keep_gate_up); unset:
  // model::keep_gate_up_rule (kept below ~67M parameters).
  std::optional<bool> keep_gate_up;
  std::int64_t checkpoint_every = 0;  // 0: only at the end (and on SIGINT/SIGTERM)
  int keep_checkpoints = 3;
  std::int64_t eval_every = 0;  // 0: max_steps / 10
  std::int64_t eval_batches = 8;
  std::string resume;  // checkpoint or run folder
  std::uint64_t seed = 1337;
  std::string log;     // empty: out/metrics.jsonl
  int threads = 0;     // 0: lmcore's default
  bool quiet = false;  // no progress line
  // Sharded training over the ranks of LMCORE_RANK / LMCORE_WORLD_SIZE / LMCORE_STORE (lmcore launch).
  bool fsdp = false;
  int reshard_after_forward = -1;  // -1 / world: free after forward; 0: keep; k: keep 1/k
  int prefetch = 1;
  bool separate_rs_group = false;
  DType reduce_dtype = DType::f32;  // the parameters' dtype is `dtype`
  // Elastic sharded training (lmcore/train/elastic.h): ranks may fail and restarted ones rejoin.
  bool elastic = false;
  int min_ranks = 1;                          // fewer ranks left: stop with a checkpoint
  std::int64_t memory_checkpoint_every = 0;   // steps between in-memory checkpoints (0: none)
};

struct TrainResult {
  std::int64_t steps_done = 0;   // the step count the run ended at
  double final_loss = 0;         // last training loss
  double final_val_loss = -1;    // last validation loss, -1 without validation data
  bool interrupted = false;      // SIGINT/SIGTERM
  std::string last_checkpoint;    // the newest checkpoint of the run (the resumed one when no step ran)
  std::string run_folder;         // where checkpoints/, metrics.jsonl and report.html went
  std::int64_t steps_this_run = 0;  // 0: resumed at max_steps, nothing to train
  double tokens_per_s = 0;       // over the run's steps
  double mfu = 0;                // model flops / (elapsed * measured GEMM peak), per rank
  double comm_wait_s = 0;        // sharded: seconds this rank waited on collectives
  int rank = 0;                  // sharded: this rank (rank 0 logs, reports and prints)
  std::size_t state_bytes = 0;   // parameters, gradients and optimizer state kept by this rank
  std::size_t peak_unsharded_bytes = 0;  // sharded: gathered parameters + full gradients at their peak
};

// Thrown when a loss or gradient becomes NaN or Inf: names the step and the first bad tensor; the
// state was saved under RUN/diverged/ first.
class TrainingDiverged : public Error {
 public:
  using Error::Error;
};

TrainResult run_training(const TrainOptions& options);

}  // namespace lmcore::train
