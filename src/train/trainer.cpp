#include "lmcore/train/trainer.h"

#include <csignal>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/core/fault_injection.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/progress.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/dist/process_group.h"
#include "lmcore/model/gemm_peak.h"
#include "lmcore/model/llama.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/builtin_corpus.h"
#include "lmcore/train/checkpoint.h"
#include "lmcore/train/data_loader.h"
#include "lmcore/train/run_log.h"
#include "src/train/elastic.h"
#include "src/train/engine.h"
#include "lmcore/version.h"

namespace lmcore::train {

namespace fs = std::filesystem;
using model::Llama;
using model::ModelConfig;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// SIGINT / SIGTERM end the run after the current step, with a checkpoint.
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) { g_signal.store(sig); }

class StopSignals {
 public:
  StopSignals() {
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// The built-in default model: ~10M parameters at a byte-level vocabulary, sized for a two-minute run on
// two cores.
ModelConfig default_config(std::int64_t vocab, std::int64_t eos, std::int64_t seq_len) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.dim = 384;
  c.n_layers = 6;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.ffn_dim = 1024;
  c.max_seq_len = std::max<std::int64_t>(seq_len, 256);
  c.tie_embeddings = true;
  c.eos_token_id = eos;
  c.bos_token_id = eos;
  return c;
}

// Ranks that disagree on the model or the data would train silently different models or hang in a
// collective of another size: compare a fingerprint of both on every rank before anything else.
std::uint64_t run_fingerprint(const ModelConfig& cfg, const TrainOptions& o) {
  const std::string fp = cfg.to_json() + fmt::format("|{}|{}|{}|{}|{}|{}|{}", o.data, o.batch_size, o.seq_len,
                                                     o.grad_accum, o.global_batch, o.seed, dtype_name(o.dtype));
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : fp) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

void check_same_run_everywhere(dist::ProcessGroup& pg, const ModelConfig& cfg, const TrainOptions& o) {
  const std::uint64_t h = run_fingerprint(cfg, o);
  Tensor mine = Tensor::empty({1}, DType::i64);
  mine.data<std::int64_t>()[0] = static_cast<std::int64_t>(h >> 1);
  Tensor all = Tensor::empty({pg.world_size()}, DType::i64);
  pg.all_gather_single(all, mine);
  const std::int64_t* v = all.data<std::int64_t>();
  for (int r = 0; r < pg.world_size(); ++r)
    LMCORE_CHECK(v[r] == v[0],
                 "rank {}: the ranks disagree on the model config or the data: rank {} has a different config, data "
                 "pattern, batch, sequence length, seed or dtype than rank 0 (fingerprints {:x} vs {:x}); every rank "
                 "must be started with the same arguments",
                 pg.rank(), r, v[r], v[0]);
}

std::string derived_val_glob(const std::string& data) {
  const auto pos = data.rfind("train");
  if (pos == std::string::npos) return "";
  std::string v = data;
  v.replace(pos, 5, "val");
  return v;
}

}  // namespace

std::string detail::LocalEngine::first_nonfinite_gradient() {
  const float* g = model_.grads().data<float>();
  for (const auto& p : model_.layout().params()) {
    for (std::int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(g[p.offset + i])) return fmt::format("{} (element {} = {})", p.name, i, g[p.offset + i]);
  }
  return "";
}

// TrainOptions::out, resolved (see there). Elastic runs keep theirs: restarted ranks rejoin the run in
// its folder with the same command line.
std::string choose_run_folder(const TrainOptions& o, const std::string& resume_dir) {
  const std::string resumed_run = resume_dir.empty() ? std::string() : run_folder_of(resume_dir);
  auto checkpoints_in = [](const std::string& run) { return list_checkpoints((fs::path(run) / "checkpoints").string()); };
  if (o.out.empty()) {
    if (!resumed_run.empty()) return resumed_run;
    if (o.elastic) return "runs/default";
    for (int i = 1;; ++i) {
      const std::string run = i == 1 ? std::string("runs/default") : fmt::format("runs/default-{}", i);
      if (checkpoints_in(run).empty()) return run;
    }
  }
  if (o.elastic) return o.out;
  const auto held = checkpoints_in(o.out);
  std::error_code ec;
  if (held.empty() || (!resumed_run.empty() && fs::equivalent(resumed_run, o.out, ec))) return o.out;
  fail("run folder '{}' already holds the checkpoints of an earlier run (newest: {}); continue that run with --resume {}, "
       "or train into another --out",
       o.out, held.back(), o.out);
}

TrainResult run_training(const TrainOptions& opts) {
  TrainOptions o = opts;
  if (o.threads > 0) set_num_threads(o.threads);
  LMCORE_CHECK(o.batch_size >= 1, "--batch-size must be >= 1, found {}", o.batch_size);
  LMCORE_CHECK(o.seq_len >= 1, "--seq-len must be >= 1, found {}", o.seq_len);
  LMCORE_CHECK(o.grad_accum >= 1, "--grad-accum must be >= 1, found {}", o.grad_accum);
  LMCORE_CHECK(o.max_steps >= 0, "--max-steps must be >= 0, found {}", o.max_steps);
  LMCORE_CHECK(o.checkpoint_every >= 0 && o.eval_every >= 0 && o.eval_batches >= 1,
               "--checkpoint-every and --eval-every must be >= 0 and --eval-batches >= 1");
  LMCORE_CHECK(o.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1, found {}", o.keep_checkpoints);
  LMCORE_CHECK(o.grad_clip >= 0, "--grad-clip must be >= 0 (0 disables), found {}", o.grad_clip);
  LMCORE_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16, "--dtype must be f32 or bf16, found {}", o.dtype);
  if (o.elastic) {
    LMCORE_CHECK(o.fsdp, "--elastic needs --fsdp (elastic training is sharded training whose ranks may change)");
    LMCORE_CHECK(o.max_steps > 0, "--elastic needs --max-steps (a rank that joins later must train to the same step)");
    LMCORE_CHECK(o.min_ranks >= 1, "--min-ranks must be >= 1, found {}", o.min_ranks);
    LMCORE_CHECK(o.checkpoint_every > 0 || o.memory_checkpoint_every > 0,
                 "--elastic needs --checkpoint-every or --memory-checkpoint-every: the survivors of a failure go back "
                 "to the last checkpoint, and restarted ranks join at checkpoints");
  }
  LMCORE_CHECK(o.memory_checkpoint_every >= 0, "--memory-checkpoint-every must be >= 0, found {}",
               o.memory_checkpoint_every);
  LMCORE_CHECK(o.elastic || (o.memory_checkpoint_every == 0 && o.min_ranks == 1),
               "--memory-checkpoint-every and --min-ranks need --elastic");
  if (const std::string bad = fault_spec_error(); !bad.empty()) fail("{}", bad);

  // ---- data and model config ----
  std::string resume_dir;
  if (!o.resume.empty()) resume_dir = resolve_checkpoint(o.resume);
  o.out = choose_run_folder(o, resume_dir);
  PreparedData builtin;
  const bool use_builtin = o.data.empty();
  if (use_builtin) {
    builtin = prepare_builtin_corpus(default_corpus_cache_dir(), !o.quiet);
    o.data = builtin.train_glob;
    if (o.val_data.empty()) o.val_data = builtin.val_glob;
    if (o.tokenizer.empty()) o.tokenizer = builtin.tokenizer_file;
    if (o.max_steps == 0 && o.time_budget == 0) o.time_budget = 120;
  }
  LMCORE_CHECK(o.time_budget >= 0, "--time-budget must be >= 0 seconds, found {}", o.time_budget);
  if (o.max_steps == 0 && o.time_budget == 0) o.max_steps = 1000;
  ModelConfig cfg;
  if (!resume_dir.empty()) {
    cfg = ModelConfig::from_file((fs::path(resume_dir) / "config.json").string());
  } else if (!o.config_file.empty()) {
    cfg = ModelConfig::from_file(o.config_file);
  } else {
    LMCORE_CHECK(use_builtin, "--data needs --config FILE.json (the model's config.json: vocab_size, hidden_size, ...)");
    cfg = default_config(builtin.vocab_size, builtin.eos_token, o.seq_len);
  }
  LMCORE_CHECK(o.seq_len <= cfg.max_seq_len, "--seq-len {} exceeds the model's max_position_embeddings {}", o.seq_len,
               cfg.max_seq_len);
  if (o.tokenizer.empty()) {
    const fs::path next = fs::path(o.data).parent_path() / "tokenizer.json";
    if (fs::is_regular_file(next)) o.tokenizer = next.string();
  }
  if (o.val_data.empty()) {
    const std::string v = derived_val_glob(o.data);
    if (!v.empty() && v != o.data) o.val_data = v;
  }
  const TokenDataset train_data = TokenDataset::open(o.data, cfg.vocab_size);
  std::optional<TokenDataset> val_data;
  if (!o.val_data.empty()) {
    try {
      val_data = TokenDataset::open(o.val_data, cfg.vocab_size);
    } catch (const Error&) {
      if (!opts.val_data.empty()) throw;  // named explicitly: its errors matter
    }
  }
  // ---- the engine: the whole model here, or this rank's shards ----
  const model::ModelOptions mo{.batch = o.batch_size, .seq_len = o.seq_len, .compute = o.dtype, .recompute = o.recompute,
                               .codegen = o.codegen, .keep_gate_up = o.keep_gate_up};
  const AdamWOptions ao{.beta1 = o.beta1, .beta2 = o.beta2, .eps = o.adam_eps, .weight_decay = o.weight_decay};
  std::unique_ptr<dist::ProcessGroup> pg;
  std::unique_ptr<detail::Engine> engine;
  std::unique_ptr<detail::Elastic> elastic;
  std::optional<detail::Resume> joined;  // elastic: this process was restarted and joined a running job
  const std::string ckpt_parent = (fs::path(o.out) / "checkpoints").string();
  if (o.fsdp) {
    dist::GroupOptions go = fsdp::group_options_for_sharding();
    go.name = "train";
    fsdp::FsdpOptions fo;
    fo.reshard_after_forward = o.reshard_after_forward;
    fo.prefetch = o.prefetch;
    fo.separate_reduce_scatter_group = o.separate_rs_group;
    fo.param_dtype = o.dtype;
    fo.reduce_dtype = o.reduce_dtype;
    fo.group_options = go;
    if (o.elastic) {
      elastic = std::make_unique<detail::Elastic>(
          detail::Elastic::Setup{o, cfg, mo, ao, fo, run_fingerprint(cfg, o), ckpt_parent, resume_dir});
      joined = elastic->start();
      engine = elastic->make_engine();
      o.global_batch = elastic->global_batch();
    } else {
      pg = std::make_unique<dist::ProcessGroup>(go);
      engine = std::make_unique<detail::FsdpEngine>(cfg, mo, ao, *pg, fo);
      check_same_run_everywhere(*pg, cfg, o);
    }
  } else {
    engine = std::make_unique<detail::LocalEngine>(cfg, mo, ao);
  }
  detail::Engine& e = *engine;
  int world = e.world_size();  // elastic: these follow the membership (adopt_world below)
  bool lead = e.rank() == 0;
  if (!lead) o.quiet = true;
  std::int64_t micro = o.batch_size * world;  // sequences per micro-step over all ranks
  if (o.global_batch > 0) {
    LMCORE_CHECK(o.global_batch % micro == 0,
                 "--global-batch {} is not a multiple of --batch-size {} x {} ranks", o.global_batch, o.batch_size, world);
    o.grad_accum = o.global_batch / micro;
  }
  if (!joined) e.init(o.seed);
  if (o.max_steps == 0) {
    // Calibrate: time a forward/backward (the second of two; nothing is updated) and fit the steps and
    // the ten validation passes (eval_batches forward-only passes, about a third of a step each) into
    // the budget.
    BatchLoader probe(train_data, micro, o.seq_len, o.seed, /*shuffle=*/false);
    std::vector<std::int32_t> px(static_cast<std::size_t>(micro * o.seq_len)), py(px.size());
    probe.next(px.data(), py.data());
    const std::int64_t mine = e.rank() * o.batch_size * o.seq_len;
    double step_s = 0;
    for (int i = 0; i < 2; ++i) {
      const auto t = Clock::now();
      e.micro_step(px.data() + mine, py.data() + mine, 1.0f, true);
      step_s = seconds_since(t);
    }
    e.zero_grad();
    step_s = e.max_over_ranks(step_s) * static_cast<double>(o.grad_accum) * 1.05;  // + optimizer and logging
    // Ten validation passes get at most a tenth of the budget (a forward-only batch costs about a third of
    // a training step).
    if (val_data)
      o.eval_batches = std::clamp<std::int64_t>(static_cast<std::int64_t>(0.1 * o.time_budget / (10.0 * step_s / 3.0)),
                                                1, o.eval_batches);
    o.max_steps = std::clamp<std::int64_t>(static_cast<std::int64_t>(0.9 * o.time_budget / step_s), 10, 1000000);
    if (!o.quiet)
      fmt::print(stderr, "  calibrated: {:.2f} s per step -> {} steps and {} validation batches for a {:.0f} s budget\n",
                 step_s, o.max_steps, o.eval_batches, o.time_budget);
  }
  if (o.eval_every == 0) o.eval_every = std::max<std::int64_t>(1, o.max_steps / 10);
  if (o.warmup < 0) o.warmup = std::min<std::int64_t>(200, std::max<std::int64_t>(1, o.max_steps / 20));
  BatchLoader loader(train_data, micro, o.seq_len, o.seed, /*shuffle=*/true);
  std::int64_t step = 0;
  if (joined) {
    step = joined->state.step;
    loader.set_position(joined->state.data);
  } else if (!resume_dir.empty()) {
    const TrainState st = e.load(resume_dir);
    step = st.step;
    loader.set_position(st.data);
    if (st.seed != o.seed && !o.quiet)
      fmt::print(stderr, "note: the checkpoint was trained with --seed {}; this run uses {} for data order\n", st.seed,
                 o.seed);
  }
  LrSchedule schedule{o.schedule, o.lr, o.warmup, o.max_steps, o.min_lr_ratio};
  schedule.validate();

  const std::string log_path = o.log.empty() ? (fs::path(o.out) / "metrics.jsonl").string() : o.log;
  if (lead) base::create_directories(o.out, "run folder");
  std::unique_ptr<RunLog> log;
  if (lead) log = std::make_unique<RunLog>(log_path, /*append=*/!resume_dir.empty());
  const double peak = model::gemm_peak_gflops(o.dtype);  // the MFU's denominator, through the layers' GEMM path
  // Sharded: what one step's communication costs with nothing to hide it (also warms the connections).
  const double comm_step_s = o.fsdp && !joined ? e.time_step_communication() : 0.0;
  // Per rank: its share of the step's flops over its own GEMM peak.
  double flops_per_step = e.flops_per_micro_batch() * static_cast<double>(o.grad_accum);
  const std::int64_t tokens_per_step = micro * o.seq_len * o.grad_accum;
  if (lead)
    log->event(resume_dir.empty() ? "start" : "resume",
               {{"step", step}, {"params", cfg.num_parameters()}, {"batch_size", o.batch_size}, {"seq_len", o.seq_len},
                {"grad_accum", o.grad_accum}, {"world_size", world}, {"dtype", std::string(dtype_name(o.dtype))},
                {"threads", num_threads()}, {"peak_gflops", peak}, {"fsdp", o.fsdp}, {"comm_step_s", comm_step_s},
                {"reshard_after_forward", o.reshard_after_forward}, {"prefetch", o.prefetch},
                {"separate_rs_group", o.separate_rs_group}, {"from", resume_dir}});
  if (!o.quiet) {
    fmt::print(stderr, "lmcore train: {:.2f}M parameters ({} layers, dim {}, {} heads / {} kv, ffn {}, vocab {}), {}\n",
               static_cast<double>(cfg.num_parameters()) / 1e6, cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads,
               cfg.ffn_dim, cfg.vocab_size, dtype_name(o.dtype));
    fmt::print(stderr, "  data: {} ({:.2f}M tokens){}\n", use_builtin ? builtin.description : o.data,
               static_cast<double>(train_data.num_tokens()) / 1e6,
               val_data ? fmt::format(", validation {:.2f}M tokens", static_cast<double>(val_data->num_tokens()) / 1e6)
                        : std::string(", no validation data"));
    fmt::print(stderr, "  batch {} x {} tokens x {} rank(s) x {} micro-batches = {} tokens/step, {} steps, lr {} ({} warmup, {}), "
               "{} threads, GEMM peak {:.0f} GFLOPS\n",
               o.batch_size, o.seq_len, world, o.grad_accum, tokens_per_step, o.max_steps, o.lr, o.warmup,
               schedule_name(o.schedule), num_threads(), peak);
    if (o.fsdp)
      fmt::print(stderr, "  sharded over {} ranks: reshard after forward {}, prefetch {}, {} reduce-scatter group, "
                 "reduce in {}; {:.1f} MiB of parameters, gradients and optimizer state on this rank; one step's "
                 "collectives take {:.3f} s back to back\n",
                 world, o.reshard_after_forward, o.prefetch, o.separate_rs_group ? "separate" : "shared",
                 dtype_name(o.reduce_dtype), static_cast<double>(e.state_bytes()) / (1 << 20), comm_step_s);
    if (!resume_dir.empty()) fmt::print(stderr, "  resumed from {} at step {}\n", resume_dir, step);
    fmt::print(stderr, "  run folder: {}{}\n", o.out,
               opts.out.empty() && resume_dir.empty() && o.out != "runs/default"
                   ? " (runs/default and the ones before hold earlier runs)"
                   : "");
  }
  if (lead && val_data) {
    const std::vector<std::string> both = shards_in_both(train_data, *val_data);
    if (!both.empty())
      fmt::print(stderr, "warning: validation shards that are also training shards: {} of {} ('{}'{}); the validation "
                 "loss is measured on text the model trains on\n",
                 both.size(), val_data->shards().size(), both[0], both.size() > 1 ? ", ..." : "");
  }

  std::int64_t row0 = e.rank() * o.batch_size * o.seq_len;  // this rank's rows of a micro-step
  std::vector<std::int32_t> x(static_cast<std::size_t>(micro * o.seq_len)), y(x.size());
  auto evaluate = [&]() -> double {
    if (!val_data) return -1;
    BatchLoader vl(*val_data, micro, o.seq_len, 0, /*shuffle=*/false);
    const std::int64_t batches = std::max<std::int64_t>(1, std::min(o.eval_batches, vl.windows_per_epoch() / micro));
    double sum = 0;
    for (std::int64_t i = 0; i < batches; ++i) {
      vl.next(x.data(), y.data());
      sum += e.eval_loss(x.data() + row0, y.data() + row0);
    }
    return sum / static_cast<double>(batches);
  };
  auto state_now = [&]() {
    TrainState s;
    s.step = step;
    s.data = loader.position();
    s.seed = o.seed;
    return s;
  };
  TrainResult result;
  result.rank = e.rank();
  auto checkpoint = [&]() {
    const auto t = Clock::now();
    result.last_checkpoint = e.save(ckpt_parent, state_now(), o.tokenizer);
    if (lead) {
      prune_checkpoints(ckpt_parent, o.keep_checkpoints);
      log->event("checkpoint", {{"step", step}, {"path", result.last_checkpoint}, {"seconds", seconds_since(t)}});
    }
  };

  // ---- the loop ----
  StopSignals signals;
  Progress progress("train", o.max_steps, "steps", o.quiet ? nullptr : stderr, 10.0, step);
  const auto run_start = Clock::now();
  double busy_seconds = 0;
  std::int64_t steps_this_run = 0;
  double last_loss = 0;
  // Elastic: after a change of membership, what depends on the world size follows it (the global batch
  // stays: more micro-batches per rank when there are fewer ranks), and the loop continues from the
  // restored step and data position.
  auto last_step_end = Clock::now(), t_step = last_step_end;
  auto adopt_world = [&](const detail::Resume& r) {
    world = e.world_size();
    lead = e.rank() == 0;
    micro = o.batch_size * world;
    o.grad_accum = o.global_batch / micro;
    loader = BatchLoader(train_data, micro, o.seq_len, o.seed, /*shuffle=*/true);
    loader.set_position(r.state.data);
    step = r.state.step;
    row0 = e.rank() * o.batch_size * o.seq_len;
    x.resize(static_cast<std::size_t>(micro * o.seq_len));
    y.resize(x.size());
    flops_per_step = e.flops_per_micro_batch() * static_cast<double>(o.grad_accum);
    result.rank = e.rank();
    if (lead && !log) log = std::make_unique<RunLog>(log_path, /*append=*/true);
    if (lead) log->event("membership", r.event);
    if (lead && !opts.quiet)
      fmt::print(stderr, "\n  membership: {} -> {} ranks ({}), continuing from step {} with {} micro-batches per rank\n",
                 r.event.value("old_world", 0), world, r.event.value("source", std::string()), step, o.grad_accum);
    last_step_end = Clock::now();
  };
  if (elastic && joined) adopt_world(*joined);
  if (elastic && !joined) elastic->begin(state_now());
  while (step < o.max_steps) try {
    fault_point("train.step");
    const auto t0 = t_step = Clock::now();
    const fsdp::CommStats comm0 = e.comm_stats();
    e.zero_grad();
    double loss = 0;
    for (std::int64_t k = 0; k < o.grad_accum; ++k) {
      loader.next(x.data(), y.data());
      loss += e.micro_step(x.data() + row0, y.data() + row0, 1.0f / static_cast<float>(o.grad_accum),
                           k + 1 == o.grad_accum);
    }
    loss /= static_cast<double>(o.grad_accum);
    const double norm = e.grad_norm();
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      const std::string bad = e.first_nonfinite_gradient();
      std::string saved;
      try {
        saved = e.save((fs::path(o.out) / "diverged").string(), state_now(), o.tokenizer);
      } catch (const Error& err) {
        saved = fmt::format("(could not be saved: {})", err.what());
      }
      if (lead)
        log->event("diverged", {{"step", step}, {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
                                {"first_bad_gradient", bad}, {"saved", saved}});
      progress.finish();
      throw TrainingDiverged(fmt::format(
          "training diverged at step {}: loss = {}, gradient norm = {}; first non-finite gradient: {}. The state "
          "before this step's update is saved in {}; the last good checkpoint is {}",
          step, loss, norm, bad.empty() ? "none (the loss itself)" : bad, saved,
          result.last_checkpoint.empty() ? (resume_dir.empty() ? "none" : resume_dir) : result.last_checkpoint));
    }
    if (o.grad_clip > 0) e.clip(norm, o.grad_clip);
    const double lr = schedule.at(step);
    e.optimizer_step(lr);
    const double dt = seconds_since(t0);
    const fsdp::CommStats comm1 = e.comm_stats();
    const double waited = (comm1.gather_wait_s - comm0.gather_wait_s) + (comm1.reduce_wait_s - comm0.reduce_wait_s);
    result.comm_wait_s += waited;
    busy_seconds += dt;
    ++step;
    ++steps_this_run;
    last_loss = loss;
    StepRecord rec{step,        loss, lr, norm, static_cast<double>(tokens_per_step) / dt,
                   flops_per_step / dt / (peak * 1e9), seconds_since(run_start), dt, waited};
    if (lead) log->step(rec);
    progress.update(step, fmt::format("loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.0f} tok/s | MFU {:.0f}%{}", loss, lr,
                                      norm, rec.tokens_per_s, rec.mfu * 100,
                                      o.fsdp ? fmt::format(" | comm wait {:.0f}%", 100 * waited / dt) : std::string()));
    const bool last = step == o.max_steps;
    if (val_data && (step % o.eval_every == 0 || last)) {
      result.final_val_loss = evaluate();
      if (lead) log->eval({step, result.final_val_loss});
    }
    if (last || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0)) checkpoint();
    // Any rank's signal stops every rank at the same step.
    const int sig = static_cast<int>(e.max_over_ranks(static_cast<double>(g_signal.load())));
    if (sig != 0 && !last) {
      checkpoint();
      if (lead) log->event("interrupted", {{"step", step}, {"signal", sig}});
      result.interrupted = true;
      break;
    }
    // A checkpoint boundary, last in the step: a restarted rank that is admitted starts at the next one.
    if (elastic && !last)
      if (auto r = elastic->boundary(state_now())) adopt_world(*r);
    last_step_end = Clock::now();
  } catch (const dist::DistError& err) {
    if (!elastic) throw;
    // A rank failed or was cut off in this step: abandon it, shrink to the survivors, continue from the
    // newest state they can restore.
    adopt_world(elastic->recover(err, step, seconds_since(t_step), seconds_since(last_step_end)));
  }
  if (elastic) elastic->finish();
  progress.finish();
  result.state_bytes = e.state_bytes();
  result.peak_unsharded_bytes = e.peak_unsharded_bytes();
  result.steps_done = step;
  result.steps_this_run = steps_this_run;
  result.run_folder = o.out;
  if (result.last_checkpoint.empty()) result.last_checkpoint = resume_dir;
  result.final_loss = last_loss;
  if (steps_this_run > 0) {
    result.tokens_per_s = static_cast<double>(tokens_per_step * steps_this_run) / busy_seconds;
    result.mfu = flops_per_step * static_cast<double>(steps_this_run) / busy_seconds / (peak * 1e9);
  }
  if (!lead) return result;
  log->event("end", {{"step", step}, {"loss", last_loss}, {"val_loss", result.final_val_loss},
                     {"tokens_per_s", result.tokens_per_s}, {"mfu", result.mfu}, {"interrupted", result.interrupted},
                     {"comm_wait_s", result.comm_wait_s}, {"world_size", world}});
  log->write_report((fs::path(o.out) / "report.html").string(), "lmcore train: " + o.out,
                    {{"model", fmt::format("{:.2f}M parameters: {} layers, dim {}, heads {} / kv {}, ffn {}, vocab {}, "
                                           "mask {}",
                                           static_cast<double>(cfg.num_parameters()) / 1e6, cfg.n_layers, cfg.dim,
                                           cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size,
                                           model::attention_mask_name(cfg.mask))},
                     {"data", use_builtin ? builtin.description : o.data},
                     {"batch", fmt::format("{} x {} tokens x {} rank(s) x {} micro-batches", o.batch_size, o.seq_len,
                                           world, o.grad_accum)},
                     {"optimizer", fmt::format("AdamW lr {} ({}, warmup {}), betas ({}, {}), weight decay {}, clip {}",
                                               o.lr, schedule_name(o.schedule), o.warmup, o.beta1, o.beta2,
                                               o.weight_decay, o.grad_clip)},
                     {"precision", std::string(dtype_name(o.dtype)) + (o.recompute ? ", recompute" : "") +
                                       (o.keep_gate_up.value_or(model::keep_gate_up_rule(cfg)) ? ", gate|up kept"
                                                                                                : ", gate|up recomputed")},
                     {"steps", fmt::format("{} of {}", step, o.max_steps)},
                     {"final loss", fmt::format("train {:.4f}, validation {:.4f}", last_loss, result.final_val_loss)},
                     {"throughput", fmt::format("{:.0f} tokens/s, MFU {:.1f}% of {:.0f} GFLOPS (measured {} GEMM)",
                                                result.tokens_per_s, result.mfu * 100, peak, dtype_name(o.dtype))},
                     {"machine", fmt::format("{} threads, SIMD {}, {}", num_threads(), simd_target_name(), blas_info())},
                     {"lmcore", LMCORE_VERSION_STRING}});
  return result;
}

}  // namespace lmcore::train
