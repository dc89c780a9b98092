// lmcore train — train a Llama-style model on token shards (or, with no arguments, the built-in
// default: a ~10M-parameter model on the Python standard library's sources for a couple of minutes).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/core/dtype.h"
#include "lmcore/train/trainer.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_train(int argc, char** argv) {
  CLI::App app{"Train a Llama-style model with lmcore's kernels. With no arguments: the built-in default (a ~10M-"
               "parameter model on the Python standard library's sources, about two minutes on two cores).",
               "lmcore train"};
  train::TrainOptions o;
  std::string dtype = "f32", schedule = "cosine";
  app.add_option("--config", o.config_file, "model config.json (Hugging Face Llama fields); default: built-in model");
  app.add_option("--data", o.data, "glob of llm.c token shards for training; default: the built-in corpus");
  app.add_option("--val-data", o.val_data, "glob of validation shards; default: --data with 'train' -> 'val'");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json to store with checkpoints; default: next to the data");
  app.add_option("--out", o.out,
                 "run folder (checkpoints, metrics.jsonl, report.html); default: with --resume the resumed run's "
                 "folder, else runs/default, or runs/default-2, -3, ... when it holds an earlier run");
  app.add_option("--max-steps", o.max_steps, "optimizer steps (0: from --time-budget, else 1000)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--time-budget", o.time_budget,
                 "seconds to train when --max-steps is 0: the steps are calibrated on this machine (0: off; the "
                 "built-in default uses 120)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per micro-batch")->check(positive())->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->check(positive())->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate")->check(positive())->capture_default_str();
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "final learning rate as a fraction of --lr")
      ->check(in_range(0, 1, false, "a fraction in [0, 1]"))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "warmup steps (-1: 5% of --max-steps, at most 200)")
      ->check(at_least(-1, "-1 or a number of steps >= 0"))
      ->capture_default_str();
  app.add_option("--schedule", schedule, "learning-rate schedule: cosine | wsd | constant")
      ->check(CLI::IsMember({"cosine", "wsd", "constant"}))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (not on norms and embeddings)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--beta1", o.beta1, "AdamW beta1")
      ->check(in_range(0, 1, true, "a number in [0, 1)"))
      ->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")
      ->check(in_range(0, 1, true, "a number in [0, 1)"))
      ->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0 disables)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--dtype", dtype, "compute dtype: f32 | bf16 (master weights and optimizer stay f32)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--recompute", o.recompute, "recompute each block's activations in backward instead of keeping them");
  std::string codegen = "off";
  app.add_option("--codegen", codegen,
                 "on: RMSNorm and the blocks' weight products (MLP with fused SwiGLU) through generated kernels "
                 "(lmcore codegen; f32; compiled and tuned, or cached, at start)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  std::string keep_gate_up = "auto";
  app.add_option("--keep-gate-up", keep_gate_up,
                 "keep each block's gate|up product for the backward (on) or recompute it there (off, less memory); "
                 "auto: kept below ~67M parameters")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "newest checkpoints kept")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "steps between validation losses (0: --max-steps / 10)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "batches per validation loss")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--resume", o.resume, "continue from a checkpoint folder, or a run folder's newest checkpoint");
  app.add_option("--seed", o.seed, "seed of the initialisation and the data order")->capture_default_str();
  app.add_option("--log", o.log, "JSON-lines metrics log (default: RUN/metrics.jsonl)");
  app.add_option("--threads", o.threads, "threads (0: LMCORE_NUM_THREADS or all cores)")
      ->check(thread_count())
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress line");
  std::string reshard = "true", reduce_dtype = "f32", param_dtype;
  app.add_option("--global-batch", o.global_batch,
                 "sequences per optimizer step over all ranks (0: batch-size x ranks x grad-accum; else it sets "
                 "--grad-accum)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_flag("--fsdp", o.fsdp,
               "shard parameters, gradients and optimizer state over the ranks of `lmcore launch` (FSDP2-style)");
  app.add_option("--reshard-after-forward", reshard,
                 "with --fsdp: true (free full parameters after forward), false (keep them) or K (keep 1/K, "
                 "all-gather within K ranks in backward)")
      ->capture_default_str();
  app.add_option("--prefetch", o.prefetch, "with --fsdp: units whose all-gather is issued ahead")
      ->check(non_negative())
      ->capture_default_str();
  app.add_flag("--separate-rs-group", o.separate_rs_group,
               "with --fsdp: reduce-scatters on their own process group, overlapping the all-gathers");
  app.add_option("--param-dtype", param_dtype, "with --fsdp: dtype parameters are gathered and computed in (= --dtype)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--reduce-dtype", reduce_dtype, "with --fsdp: dtype gradients are reduce-scattered in: f32 | bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--elastic", o.elastic,
               "with --fsdp: when a rank dies or is cut off, the others shrink to the survivors, reload the last "
               "checkpoint re-sharded and go on (same global batch); restarted ranks rejoin at checkpoints (use "
               "`lmcore launch --keep-going [--restart-failed K]`)");
  app.add_option("--min-ranks", o.min_ranks, "with --elastic: fewer ranks left stop the job with a checkpoint")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--memory-checkpoint-every", o.memory_checkpoint_every,
                 "with --elastic: steps between in-memory checkpoints (each rank also keeps its neighbour's shard; "
                 "0: none, recovery reads --checkpoint-every's from disk)")
      ->check(non_negative())
      ->capture_default_str();
  LMCORE_PARSE_ARGS(app, argc, argv);
  try {
    o.dtype = dtype_from_name(param_dtype.empty() ? dtype : param_dtype);
    o.codegen = codegen == "on";
    if (keep_gate_up != "auto") o.keep_gate_up = keep_gate_up == "on";
    o.schedule = train::schedule_from_name(schedule);
    o.reduce_dtype = dtype_from_name(reduce_dtype);
    if (reshard == "true") o.reshard_after_forward = -1;
    else if (reshard == "false") o.reshard_after_forward = 0;
    else {
      std::size_t used = 0;
      int k = -2;
      try {
        k = std::stoi(reshard, &used);
      } catch (const std::exception&) {
      }
      LMCORE_CHECK(used == reshard.size() && k >= 1,
                   "--reshard-after-forward must be true, false or a positive integer, found '{}'", reshard);
      o.reshard_after_forward = k;
    }
    LMCORE_CHECK(o.fsdp || (o.prefetch == 1 && !o.separate_rs_group && reshard == "true" && param_dtype.empty() &&
                            reduce_dtype == "f32"),
                 "--reshard-after-forward, --prefetch, --separate-rs-group, --param-dtype and --reduce-dtype need --fsdp");
    LMCORE_CHECK(!o.elastic || o.fsdp, "--elastic needs --fsdp");
    LMCORE_CHECK(o.elastic || (o.min_ranks == 1 && o.memory_checkpoint_every == 0),
                 "--min-ranks and --memory-checkpoint-every need --elastic");
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore train: {}\n", e.what());
    return 2;
  }
  try {
    const train::TrainResult r = train::run_training(o);
    if (r.rank != 0) return r.interrupted ? 130 : 0;  // rank 0 speaks for the run
    if (r.interrupted) {
      fmt::print(stderr, "lmcore train: stopped at step {}; checkpoint {} (continue with --resume {})\n", r.steps_done,
                 r.last_checkpoint, r.run_folder);
      return 130;
    }
    if (r.steps_this_run == 0) {
      fmt::print("step {}: nothing to train, the checkpoint is at --max-steps already (raise it to go on)\n",
                 r.steps_done);
      fmt::print("checkpoint: {}\nreport: {}/report.html\n", r.last_checkpoint, r.run_folder);
      return 0;
    }
    fmt::print("step {}: train loss {:.4f}, validation loss {:.4f}, {:.0f} tokens/s, MFU {:.1f}%\n", r.steps_done,
               r.final_loss, r.final_val_loss, r.tokens_per_s, r.mfu * 100);
    fmt::print("checkpoint: {}\nreport: {}/report.html\n", r.last_checkpoint, r.run_folder);
    return 0;
  } catch (const train::TrainingDiverged& e) {
    fmt::print(stderr, "lmcore train: {}\n", e.what());
    return 3;
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore train: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace lmcore::cli
