// The training loop end to end on a tiny model and synthetic shards: resume equivalence, determinism,
// overfitting one batch, divergence, a full disk, SIGTERM, and the data errors a user can make.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "lmcore/core/parallel.h"
#include "lmcore/train/checkpoint.h"
#include "lmcore/train/data_loader.h"
#include "lmcore/train/trainer.h"
#include "tests/train/train_test_util.h"

namespace lmcore::train {
namespace {

namespace fs = std::filesystem;

TrainOptions tiny_run(const testing::TempDir& dir, const std::string& out, std::int64_t steps) {
  TrainOptions o;
  o.config_file = dir.file("config.json");
  o.data = dir.file("data_train_*.bin");
  o.out = dir.file(out);
  o.max_steps = steps;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr = 3e-3;
  o.warmup = 3;
  o.eval_every = 5;
  o.eval_batches = 2;
  o.quiet = true;
  return o;
}

TEST(Trainer, ResumedRunHasTheSameLossBitsAsAnUninterruptedOne) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  // 20 steps with a checkpoint at 10; then a second run resumes from that checkpoint (same schedule:
  // max_steps stays 20) and must log the same 10 losses, bit for bit.
  TrainOptions whole = tiny_run(dir, "whole", 20);
  whole.grad_accum = 2;
  whole.checkpoint_every = 10;
  const TrainResult a = run_training(whole);
  EXPECT_EQ(a.steps_done, 20);
  const auto ckpts = list_checkpoints(whole.out + "/checkpoints");
  ASSERT_EQ(ckpts.size(), 2u);
  TrainOptions resumed = whole;
  resumed.out = dir.file("resumed");
  resumed.resume = ckpts[0];
  const TrainResult b = run_training(resumed);
  EXPECT_EQ(b.steps_done, 20);
  const auto la = testing::logged_losses(whole.out + "/metrics.jsonl");
  const auto lb = testing::logged_losses(resumed.out + "/metrics.jsonl");
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(la[10 + i], lb[i]) << "step " << 11 + i;
  EXPECT_EQ(a.final_loss, b.final_loss);
  EXPECT_LT(la.back(), la.front() - 0.5);  // it trains
}

TEST(Trainer, SameSeedAndThreadsGiveTheSameBits) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  std::vector<std::vector<double>> runs;
  for (const char* out : {"a", "b"}) {
    TrainOptions o = tiny_run(dir, out, 8);
    o.threads = 2;
    run_training(o);
    runs.push_back(testing::logged_losses(o.out + "/metrics.jsonl"));
  }
  EXPECT_EQ(runs[0], runs[1]);
  TrainOptions other = tiny_run(dir, "c", 8);
  other.seed = 99;
  run_training(other);
  EXPECT_NE(testing::logged_losses(other.out + "/metrics.jsonl"), runs[0]);
}

TEST(Trainer, OverfitsASingleBatch) {
  testing::TempDir dir;
  const auto c = testing::tiny_config();
  testing::write_dataset(dir.path(), c, /*train_tokens=*/4 * 32 + 1);  // exactly one batch of windows
  TrainOptions o = tiny_run(dir, "overfit", 150);
  o.lr = 1e-2;
  o.weight_decay = 0;
  o.schedule = Schedule::constant;
  const TrainResult r = run_training(o);
  EXPECT_LT(r.final_loss, 0.05) << "one batch memorised";
}

TEST(Trainer, DivergenceStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  TrainOptions o = tiny_run(dir, "div", 40);
  o.checkpoint_every = 2;
  o.lr = 1e6;  // explodes within a few steps
  o.warmup = 0;
  o.grad_clip = 0;
  std::string message;
  try {
    run_training(o);
    FAIL() << "expected TrainingDiverged";
  } catch (const TrainingDiverged& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("training diverged at step "), std::string::npos) << message;
  EXPECT_NE(message.find("first non-finite gradient"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_directory(o.out + "/diverged")) << message;
  EXPECT_FALSE(list_checkpoints(o.out + "/diverged").empty());
  const auto good = list_checkpoints(o.out + "/checkpoints");
  ASSERT_FALSE(good.empty()) << message;
  EXPECT_NE(message.find(good.back()), std::string::npos) << message;
  // The last good checkpoint still loads.
  model::ModelConfig cfg = model::ModelConfig::from_file(good.back() + "/config.json");
  model::Llama m(cfg, {.batch = 1, .seq_len = 8});
  AdamW opt(m.layout(), {});
  EXPECT_NO_THROW(load_checkpoint(good.back(), m, opt));
}

// A full disk (simulated with RLIMIT_FSIZE in a child process) while writing a checkpoint leaves the
// previous checkpoint intact and no temporary folder behind.
TEST(Trainer, FullDiskWhileCheckpointingKeepsThePreviousCheckpoint) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  TrainOptions o = tiny_run(dir, "disk", 2);
  run_training(o);
  const auto before = list_checkpoints(o.out + "/checkpoints");
  ASSERT_EQ(before.size(), 1u);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {40000, 40000};  // smaller than model.safetensors
    ::setrlimit(RLIMIT_FSIZE, &lim);
    TrainOptions next = o;
    next.resume = before[0];
    next.max_steps = 4;
    try {
      run_training(next);
    } catch (const Error& e) {
      std::ofstream(dir.file("child_error.txt")) << e.what();
      ::_exit(7);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  std::ifstream in(dir.file("child_error.txt"));
  const std::string err((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_EQ(list_checkpoints(o.out + "/checkpoints"), before);
  for (const auto& e : fs::directory_iterator(o.out + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  model::ModelConfig cfg = model::ModelConfig::from_file(before[0] + "/config.json");
  model::Llama m(cfg, {.batch = 1, .seq_len = 8});
  AdamW opt(m.layout(), {});
  EXPECT_EQ(load_checkpoint(before[0], m, opt).step, 2);
}

TEST(Trainer, SigtermSavesACheckpointThatResumes) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  TrainOptions o = tiny_run(dir, "term", 100000);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const TrainResult r = run_training(o);
    ::_exit(r.interrupted ? 0 : 9);
  }
  // Wait for the first logged step, then ask the run to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (testing::logged_losses(o.out + "/metrics.jsonl").size() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto ckpts = list_checkpoints(o.out + "/checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  const std::size_t logged = testing::logged_losses(o.out + "/metrics.jsonl").size();
  EXPECT_NE(ckpts[0].find(fmt::format("step_{:08}", logged)), std::string::npos) << ckpts[0];
  std::ifstream in(o.out + "/metrics.jsonl");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("\"event\":\"interrupted\""), std::string::npos);
  EXPECT_TRUE(fs::is_regular_file(o.out + "/report.html"));
  // Continuing from it (into the same run folder: the log is appended to).
  TrainOptions more = o;
  more.resume = o.out;
  more.max_steps = static_cast<std::int64_t>(logged) + 2;
  EXPECT_EQ(run_training(more).steps_done, static_cast<std::int64_t>(logged) + 2);
  EXPECT_EQ(testing::logged_losses(o.out + "/metrics.jsonl").size(), logged + 2);
}

// The run folder: a fresh run refuses one that holds another run's checkpoints (its own would be
// pruned in their place and --resume would pick the other run's newest); --resume without --out
// continues in the resumed run's folder; resuming at max_steps trains nothing and says so.
TEST(Trainer, RunFolderIsNeverSharedByTwoRuns) {
  testing::TempDir dir;
  testing::write_dataset(dir.path(), testing::tiny_config());
  TrainOptions first = tiny_run(dir, "run", 4);
  first.checkpoint_every = 2;
  const TrainResult a = run_training(first);
  EXPECT_EQ(a.run_folder, first.out);
  EXPECT_EQ(list_checkpoints(first.out + "/checkpoints").size(), 2u);
  const std::string e = testing::error_of([&] { run_training(tiny_run(dir, "run", 3)); });
  EXPECT_NE(e.find("run folder '" + first.out + "' already holds the checkpoints of an earlier run (newest: " +
                   first.out + "/checkpoints/step_00000004); continue that run with --resume " + first.out),
            std::string::npos)
      << e;
  EXPECT_EQ(list_checkpoints(first.out + "/checkpoints").size(), 2u);  // untouched

  TrainOptions more = tiny_run(dir, "", 6);
  more.out = "";
  more.resume = first.out;
  more.checkpoint_every = 2;
  const TrainResult b = run_training(more);
  EXPECT_EQ(b.run_folder, first.out);
  EXPECT_EQ(b.steps_this_run, 2);
  EXPECT_EQ(b.last_checkpoint, first.out + "/checkpoints/step_00000006");

  more.max_steps = 6;
  const TrainResult c = run_training(more);
  EXPECT_EQ(c.steps_this_run, 0);
  EXPECT_EQ(c.steps_done, 6);
  EXPECT_EQ(c.last_checkpoint, first.out + "/checkpoints/step_00000006");

  EXPECT_EQ(run_folder_of("runs/a/checkpoints/step_00000012"), "runs/a");
  EXPECT_EQ(run_folder_of("runs/a/checkpoints/step_00000012/"), "runs/a");
  EXPECT_EQ(run_folder_of("checkpoints/step_00000012"), ".");
  EXPECT_EQ(run_folder_of("exported/step_00000012"), "");
  EXPECT_EQ(run_folder_of("runs/a/checkpoints/latest"), "");
}

TEST(Trainer, DataAndConfigErrorsNameTheFileAndValue) {
  testing::TempDir dir;
  const auto c = testing::tiny_config();
  testing::write_dataset(dir.path(), c);
  TrainOptions o = tiny_run(dir, "err", 2);
  o.data = dir.file("nothing_*.bin");
  EXPECT_NE(testing::error_of([&] { run_training(o); }).find("no file matches the pattern"), std::string::npos);
  // A shard with a token id >= vocab_size.
  const std::uint32_t big[] = {1, 2, 50};
  io::write_token_shard(dir.file("bad_train_000000.bin"), big, 3, 64);
  o.data = dir.file("bad_train_*.bin");
  std::string e = testing::error_of([&] { run_training(o); });
  EXPECT_NE(e.find("bad_train_000000.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("token 50 at position 2 is >= vocab_size 40"), std::string::npos) << e;
  // Too little data for one window.
  const std::uint32_t few[] = {1, 2, 3};
  io::write_token_shard(dir.file("few_train_000000.bin"), few, 3, 40);
  o.data = dir.file("few_train_*.bin");
  e = testing::error_of([&] { run_training(o); });
  EXPECT_NE(e.find("give no window of seq_len + 1 = 33 tokens"), std::string::npos) << e;
  o = tiny_run(dir, "err", 2);
  o.seq_len = 65;
  e = testing::error_of([&] { run_training(o); });
  EXPECT_NE(e.find("--seq-len 65 exceeds the model's max_position_embeddings 64"), std::string::npos) << e;
  o = tiny_run(dir, "err", 2);
  o.resume = dir.file("nowhere");
  EXPECT_NE(testing::error_of([&] { run_training(o); }).find("does not exist"), std::string::npos);
  // A checkpoint of another model shape.
  TrainOptions small = tiny_run(dir, "small", 1);
  run_training(small);
  auto other = c;
  other.dim = 48;
  other.n_heads = 4;
  std::ofstream(dir.file("other.json")) << other.to_json();
  o = tiny_run(dir, "err2", 2);
  o.config_file = dir.file("other.json");
  model::Llama m(other, {.batch = 1, .seq_len = 8});
  AdamW opt(m.layout(), {});
  e = testing::error_of([&] { load_checkpoint(list_checkpoints(small.out + "/checkpoints")[0], m, opt); });
  EXPECT_NE(e.find("hidden_size 32 vs 48"), std::string::npos) << e;
}

TEST(BatchLoader, EveryTargetOnceAnEpochInASeededOrder) {
  testing::TempDir dir;
  std::vector<std::uint32_t> a(101), b(50);
  for (std::uint32_t i = 0; i < a.size(); ++i) a[i] = i % 97;
  for (std::uint32_t i = 0; i < b.size(); ++i) b[i] = 3;
  io::write_token_shard(dir.file("s_0.bin"), a.data(), 101, 100);
  io::write_token_shard(dir.file("s_1.bin"), b.data(), 50, 100);
  const TokenDataset data = TokenDataset::open(dir.file("s_*.bin"), 100);
  EXPECT_EQ(data.shards().size(), 2u);
  BatchLoader l(data, 1, 10, 7, true);
  EXPECT_EQ(l.windows_per_epoch(), 10 + 4);  // (101 - 1) / 10 + (50 - 1) / 10
  std::vector<int> seen_starts;
  std::int32_t x[10], y[10];
  for (int i = 0; i < 14; ++i) {
    l.next(x, y);
    for (int j = 0; j < 9; ++j) ASSERT_EQ(x[j + 1], y[j]);  // targets are the inputs shifted by one
    seen_starts.push_back(x[0] == 3 ? 1000 + i : x[0]);
  }
  std::vector<int> firsts;
  for (int s : seen_starts)
    if (s < 1000) firsts.push_back(s);
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<int>{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
  EXPECT_EQ(l.position().epoch, 0);
  l.next(x, y);
  EXPECT_EQ(l.position().epoch, 1);
  // The same seed and position give the same batches.
  BatchLoader r(data, 1, 10, 7, true);
  r.set_position({1, 0});
  BatchLoader s(data, 1, 10, 7, true);
  s.set_position({1, 0});
  for (int i = 0; i < 20; ++i) {
    std::int32_t x2[10], y2[10];
    r.next(x, y);
    s.next(x2, y2);
    ASSERT_TRUE(std::equal(x, x + 10, x2));
  }
  EXPECT_NE(testing::error_of([&] { r.set_position({0, 15}); }).find("outside the 14 windows"), std::string::npos);
}

TEST(TokenDataset, ShardsInBothSplitsAreFoundUnderAnyName) {
  testing::TempDir dir;
  std::vector<std::uint32_t> t(64, 5);
  io::write_token_shard(dir.file("d_train_0.bin"), t.data(), 64, 100);
  io::write_token_shard(dir.file("d_train_1.bin"), t.data(), 64, 100);
  io::write_token_shard(dir.file("d_val_0.bin"), t.data(), 64, 100);  // same bytes, another file
  const TokenDataset train = TokenDataset::open(dir.file("d_train_*.bin"), 100);
  EXPECT_TRUE(shards_in_both(train, TokenDataset::open(dir.file("d_val_*.bin"), 100)).empty());
  EXPECT_EQ(shards_in_both(train, TokenDataset::open(dir.file("d_*_1.bin"), 100)),
            std::vector<std::string>{dir.file("d_train_1.bin")});
  ASSERT_EQ(::link(dir.file("d_train_0.bin").c_str(), dir.file("linked_val.bin").c_str()), 0);
  EXPECT_EQ(shards_in_both(train, TokenDataset::open(dir.file("linked_*.bin"), 100)),
            std::vector<std::string>{dir.file("linked_val.bin")});
}

}  // namespace
}  // namespace lmcore::train
