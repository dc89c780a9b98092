// Elastic sharded training: a rank killed (SIGKILL, through a fault point) during a forward, during a
// backward with a reduce-scatter in flight, or in the middle of a checkpoint write; the survivors go
// on, and their losses equal those of a run that had two ranks from the checkpoint they restored (same
// global batch). A restarted rank is admitted back and the run ends with three. Below --min-ranks the
// survivors stop with a checkpoint. Plus the re-sharding plan and exchange on their own.
//
// Every rank is a forked process (the test process itself never starts a group), on a file store.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "lmcore/train/checkpoint.h"
#include "lmcore/train/trainer.h"
#include "src/train/elastic.h"
#include "tests/dist/multiprocess.h"
#include "tests/train/train_test_util.h"

namespace lmcore::train {
namespace {

namespace fs = std::filesystem;
namespace tt = testing;
using dist::testing::describe_exit;
using dist::testing::exited_ok;
using dist::testing::spawn;
using dist::testing::wait_all;
using detail::Piece;
using detail::Provider;

// ---- the re-sharding plan ----

// Every element of every unit reaches exactly the new rank that owns it, from the old rank that had it.
TEST(ElasticReshard, PiecesCoverEveryElementOnceFromItsOldOwner) {
  std::mt19937 rng(7);
  for (int old_world : {1, 2, 3, 4, 5}) {
    for (int new_world : {1, 2, 3, 4, 7}) {
      const std::vector<std::int64_t> units = {0, 1, 2, 3, 5, 7, 8, 63, 64, 65, 1000};
      std::vector<Provider> providers(static_cast<std::size_t>(old_world));
      for (auto& p : providers) p = {static_cast<int>(rng() % new_world), (rng() & 1) != 0};
      const auto pieces = detail::plan_pieces(units, old_world, new_world, providers);
      for (std::size_t u = 0; u < units.size(); ++u) {
        const std::int64_t n = units[u];
        const std::int64_t so = (n + old_world - 1) / old_world, sn = (n + new_world - 1) / new_world;
        std::vector<int> hits(static_cast<std::size_t>(n), 0);
        for (const Piece& p : pieces) {
          if (p.unit != static_cast<int>(u)) continue;
          ASSERT_LT(p.begin, p.end);
          for (std::int64_t x = p.begin; x < p.end; ++x) {
            ++hits[static_cast<std::size_t>(x)];
            ASSERT_EQ(x / so, p.old_rank) << "unit " << u << " element " << x;
            ASSERT_EQ(x / sn, p.dst) << "unit " << u << " element " << x;
            ASSERT_EQ(p.src, providers[p.old_rank].new_rank);
          }
        }
        for (std::int64_t x = 0; x < n; ++x)
          ASSERT_EQ(hits[static_cast<std::size_t>(x)], 1)
              << old_world << " -> " << new_world << " ranks, unit of " << n << ", element " << x;
      }
      // Sorted as sender and receiver walk them.
      for (std::size_t i = 1; i < pieces.size(); ++i)
        ASSERT_LE(std::tie(pieces[i - 1].dst, pieces[i - 1].src, pieces[i - 1].unit, pieces[i - 1].old_rank),
                  std::tie(pieces[i].dst, pieces[i].src, pieces[i].unit, pieces[i].old_rank));
    }
  }
}

TEST(ElasticReshard, ALostShardWithoutProviderIsAnError) {
  const std::string e = tt::error_of([] { detail::plan_pieces({10}, 3, 2, {{0, false}, {-1, false}, {1, false}}); });
  EXPECT_NE(e.find("old rank 1's shards have no provider"), std::string::npos) << e;
}

// The exchange itself, as the ranks of a new group run it: 3 old ranks whose shards are provided by 2
// (one own + one replica, one own), and 2 members growing to 3 (the third provides nothing). Every
// element arrives with its value (a function of kind and global index), padding is zero.
TEST(ElasticReshard, RedistributeMovesEveryValueToItsNewShard) {
  const std::vector<std::int64_t> units = {13, 0, 7, 64, 5};
  struct Case {
    int old_world, new_world;
    std::vector<Provider> providers;
  };
  for (const Case& c : {Case{3, 2, {{0, false}, {0, true}, {1, false}}}, Case{2, 3, {{0, false}, {1, false}}},
                        Case{4, 1, {{0, false}, {0, true}, {0, true}, {0, false}}}}) {
    const std::string store = dist::testing::fresh_store("elastic-reshard");
    const bool ok = dist::testing::run_ranks(c.new_world, [&](int r) {
      dist::ProcessGroup pg(dist::testing::group_options(r, c.new_world, store));
      const auto old_off = detail::local_offsets(units, c.old_world);
      const auto new_off = detail::local_offsets(units, c.new_world);
      auto value = [](int k, std::int64_t unit_begin, std::int64_t x) {
        return static_cast<float>(1000 * k + unit_begin + x + 1);
      };
      std::vector<std::int64_t> unit_begin = {0};
      for (std::int64_t n : units) unit_begin.push_back(unit_begin.back() + n);
      // Old rank o's shards of kind k, as the old layout holds them (padding: NaN, never to be read).
      std::map<int, std::vector<float>> old_shards;
      for (int o = 0; o < c.old_world; ++o)
        for (int k = 0; k < 3; ++k) {
          std::vector<float>& v = old_shards[o * 3 + k];
          v.assign(static_cast<std::size_t>(old_off.back()), NAN);
          for (std::size_t u = 0; u < units.size(); ++u) {
            const std::int64_t s = (units[u] + c.old_world - 1) / c.old_world;
            for (std::int64_t i = 0; i < s && o * s + i < units[u]; ++i)
              v[static_cast<std::size_t>(old_off[u] + i)] = value(k, unit_begin[u], o * s + i);
          }
        }
      std::vector<float> out[3];
      float* dst[3];
      for (int k = 0; k < 3; ++k) {
        out[k].assign(static_cast<std::size_t>(new_off.back()), -1.0f);
        dst[k] = out[k].data();
      }
      detail::redistribute(pg, units, c.old_world, c.providers,
                           [&](int o, int k) -> const float* {
                             RANK_CHECK(c.providers[o].new_rank == r, "rank {} asked for old rank {}", r, o);
                             return old_shards[o * 3 + k].data();
                           },
                           dst);
      for (int k = 0; k < 3; ++k)
        for (std::size_t u = 0; u < units.size(); ++u) {
          const std::int64_t s = (units[u] + c.new_world - 1) / c.new_world;
          for (std::int64_t i = 0; i < s; ++i) {
            const std::int64_t x = r * s + i;
            const float want = x < units[u] ? value(k, unit_begin[u], x) : 0.0f;
            RANK_CHECK(out[k][static_cast<std::size_t>(new_off[u] + i)] == want, "kind {} unit {} element {}: {} vs {}",
                       k, u, x, out[k][static_cast<std::size_t>(new_off[u] + i)], want);
          }
        }
    });
    EXPECT_TRUE(ok) << c.old_world << " -> " << c.new_world;
  }
}

// ---- choosing what to restore ----

using detail::RankHolding;
using detail::RestoreSource;
constexpr std::int64_t key(std::int64_t step, int generation) { return step * 65536 + generation; }

// Survivors of 3 (old ranks 0 and 2): rank 1's shard is rank 0's replica.
TEST(ElasticSource, OneLostRankComesBackFromItsLeftNeighboursReplica) {
  std::vector<RankHolding> r(2);
  r[0] = {key(4, 0), 0, 3, -1, -1, 0, 0, 3};
  r[1] = {key(4, 0), 2, 3, -1, -1, 0, 2, 3};
  const auto d = detail::decide_source(r, true, 2);
  EXPECT_EQ(d.source, RestoreSource::memory);
  EXPECT_EQ(d.memory_step, 4);
  ASSERT_EQ(d.providers.size(), 3u);
  EXPECT_EQ(d.providers[0].new_rank, 0);
  EXPECT_FALSE(d.providers[0].replica);
  EXPECT_EQ(d.providers[1].new_rank, 0);
  EXPECT_TRUE(d.providers[1].replica);
  EXPECT_EQ(d.providers[2].new_rank, 1);
  EXPECT_FALSE(d.providers[2].replica);
  EXPECT_EQ(d.promote, std::vector<bool>({false, false}));
  // A newer disk checkpoint wins.
  EXPECT_EQ(detail::decide_source(r, true, 5).source, RestoreSource::disk);
}

// A failure between the barrier and the commit: rank 0 committed step 6, rank 1 still holds it as
// pending (and step 4 committed). Rank 0's commit proves that every rank finished the exchange, so
// rank 1 promotes, and both restore step 6.
TEST(ElasticSource, APendingSnapshotSomeoneCommittedIsPromoted) {
  std::vector<RankHolding> r(2);
  r[0] = {key(6, 0), 0, 3, -1, -1, 0, 0, 3};
  r[1] = {key(4, 0), 1, 3, key(6, 0), 1, 3, 1, 3};
  const auto d = detail::decide_source(r, true, -1);
  EXPECT_EQ(d.source, RestoreSource::memory);
  EXPECT_EQ(d.memory_step, 6);
  EXPECT_EQ(d.promote, std::vector<bool>({false, true}));
  EXPECT_EQ(d.providers[2].new_rank, 1);  // rank 2's shard: the replica of old rank 1
  EXPECT_TRUE(d.providers[2].replica);
  // Nobody committed step 6: its pending replicas may be torn, everyone goes back to step 4.
  r[0] = {key(4, 0), 0, 3, key(6, 0), 0, 3, 0, 3};
  const auto back = detail::decide_source(r, true, -1);
  EXPECT_EQ(back.memory_step, 4);
  EXPECT_EQ(back.promote, std::vector<bool>({false, false}));
}

TEST(ElasticSource, AShardAndItsReplicaBothGoneFallsBackToDiskOrTheStart) {
  std::vector<RankHolding> r(2);  // old ranks 0 and 3 of 4 survive: 2's shard and replica (on 1) are gone
  r[0] = {key(4, 0), 0, 4, -1, -1, 0, 0, 4};
  r[1] = {key(4, 0), 3, 4, -1, -1, 0, 3, 4};
  auto d = detail::decide_source(r, true, 3);
  EXPECT_EQ(d.source, RestoreSource::disk);
  EXPECT_TRUE(d.memory_lost);
  EXPECT_TRUE(d.promote.empty() || d.promote == std::vector<bool>({false, false}));
  d = detail::decide_source(r, true, -1);
  EXPECT_EQ(d.source, RestoreSource::initial);
}

// A boundary: members' live shards, a restarted rank provides nothing; a member missing from the new
// group turns it into a failure.
TEST(ElasticSource, ABoundaryUsesTheLiveShardsUnlessAMemberIsMissing) {
  std::vector<RankHolding> r(3);
  r[0] = {key(6, 1), 0, 2, -1, -1, 0, 0, 2};
  r[1] = {key(6, 1), 1, 2, -1, -1, 0, 1, 2};
  r[2] = {};  // the restarted rank
  auto d = detail::decide_source(r, false, 6);
  EXPECT_EQ(d.source, RestoreSource::live);
  EXPECT_EQ(d.source_world, 2);
  EXPECT_EQ(d.providers[0].new_rank, 0);
  EXPECT_EQ(d.providers[1].new_rank, 1);
  EXPECT_FALSE(d.member_lost);
  r[1] = {};  // member 1 did not make it (and a restarted rank took its place)
  r[1].prev_world = 0;
  r[0].prev_world = 2;
  d = detail::decide_source(r, false, 6);
  EXPECT_TRUE(d.member_lost);
  EXPECT_EQ(d.source, RestoreSource::memory);  // the snapshot of this boundary: member 1's shard is 0's replica
  EXPECT_EQ(d.memory_step, 6);
  EXPECT_EQ(d.providers[1].new_rank, 0);
  EXPECT_TRUE(d.providers[1].replica);
}

// ---- whole runs ----

model::ModelConfig test_config() {
  model::ModelConfig c = tt::tiny_config(48);
  c.n_layers = 3;
  c.dim = 48;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 96;
  return c;
}

// The last logged loss of each step (a recovered run logs the steps after its checkpoint twice).
std::map<std::int64_t, double> losses_by_step(const std::string& log) {
  std::map<std::int64_t, double> out;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == "step") out[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

std::vector<nlohmann::json> events(const std::string& log, const std::string& name) {
  std::vector<nlohmann::json> out;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == name) out.push_back(j);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

class Elastic : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = test_config();
    tt::write_dataset(dir_.path(), c_);
  }
  // Global batch 6 = 1 sequence x 3 ranks x 2 micro-batches = 1 x 2 ranks x 3.
  TrainOptions options(const std::string& out, std::int64_t steps) {
    TrainOptions o;
    o.config_file = dir_.file("config.json");
    o.data = dir_.file("data_train_*.bin");
    o.out = dir_.file(out);
    o.max_steps = steps;
    o.batch_size = 1;
    o.global_batch = 6;
    o.seq_len = 32;
    o.lr = 3e-3;
    o.warmup = 2;
    o.eval_every = 1000;
    o.eval_batches = 1;
    o.keep_checkpoints = 100;
    o.quiet = true;
    o.threads = 1;
    o.fsdp = true;
    return o;
  }
  // Forks rank r of `world` on `store` running `o`; its error message (if any) goes to OUT/error_<tag>.
  pid_t start_rank(const TrainOptions& o, int r, int world, const std::string& store, const std::string& fault,
                   const std::string& fault_after = "", int restart = 0) {
    return spawn(
        [=] {
          ::setenv("LMCORE_RANK", std::to_string(r).c_str(), 1);
          ::setenv("LMCORE_WORLD_SIZE", std::to_string(world).c_str(), 1);
          ::setenv("LMCORE_STORE", store.c_str(), 1);
          ::setenv("LMCORE_DIST_TIMEOUT_MS", "20000", 1);
          if (!fault.empty()) ::setenv("LMCORE_FAULT", fault.c_str(), 1);
          if (!fault_after.empty()) ::setenv("LMCORE_FAULT_AFTER", fault_after.c_str(), 1);
          if (restart > 0) ::setenv("LMCORE_RESTART_COUNT", std::to_string(restart).c_str(), 1);
          try {
            train::run_training(o);
          } catch (const std::exception& e) {
            fs::create_directories(o.out);
            std::ofstream(o.out + fmt::format("/error_{}_{}", r, restart)) << e.what();
            throw;
          }
        },
        fmt::format("rank {}{}", r, restart > 0 ? " (restarted)" : ""));
  }
  // Runs `o` on `world` ranks with no failure; true when all succeed.
  bool run_plain(const TrainOptions& o, int world) {
    const std::string store = dist::testing::fresh_store("elastic-ref");
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) pids.push_back(start_rank(o, r, world, store, ""));
    bool ok = true;
    for (int st : wait_all(pids, std::chrono::seconds(120))) ok = ok && exited_ok(st);
    return ok;
  }
  // Three elastic ranks, `victim` armed with `fault` (after `fault_after`); expects the victim killed by
  // SIGKILL and the survivors to finish. Returns the run's membership events.
  std::vector<nlohmann::json> run_with_kill(const TrainOptions& o, int victim, const std::string& fault,
                                            const std::string& fault_after) {
    return run_with_kills(o, 3, {{victim, {fault, fault_after}}});
  }
  // `world` elastic ranks; each victim armed with its (fault, fault_after).
  std::vector<nlohmann::json> run_with_kills(const TrainOptions& o, int world,
                                             const std::map<int, std::pair<std::string, std::string>>& victims) {
    const std::string store = dist::testing::fresh_store("elastic");
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      const auto it = victims.find(r);
      pids.push_back(it == victims.end() ? start_rank(o, r, world, store, "")
                                         : start_rank(o, r, world, store, it->second.first, it->second.second));
    }
    const auto st = wait_all(pids, std::chrono::seconds(120));
    for (int r = 0; r < world; ++r) {
      if (victims.count(r)) {
        EXPECT_TRUE(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL) << "victim: " << describe_exit(st[r]);
      } else {
        EXPECT_TRUE(exited_ok(st[r])) << "survivor " << r << ": " << describe_exit(st[r]) << " "
                                      << slurp(o.out + fmt::format("/error_{}_0", r));
      }
    }
    return events(o.out + "/metrics.jsonl", "membership");
  }
  // The survivors' losses from step `from` on equal those of 2 ranks resumed from the checkpoint of
  // `from` (same global batch): the same computation, so equal to f32 reduction order (measured: equal
  // bits; the bound is the FSDP tests').
  // `checkpoint`: the state of step `from` (default: the elastic run's own disk checkpoint of it).
  void expect_two_rank_curve(const TrainOptions& elastic, std::int64_t from, const std::string& what,
                             const std::string& checkpoint = "") {
    TrainOptions ref = elastic;
    ref.elastic = false;
    ref.memory_checkpoint_every = 0;
    ref.min_ranks = 1;
    ref.out = elastic.out + "_ref2";
    ref.resume = checkpoint.empty() ? elastic.out + fmt::format("/checkpoints/step_{:08}", from) : checkpoint;
    ASSERT_TRUE(fs::is_directory(ref.resume)) << ref.resume;
    ASSERT_TRUE(run_plain(ref, 2)) << what << ": reference run";
    const auto got = losses_by_step(elastic.out + "/metrics.jsonl");
    const auto want = losses_by_step(ref.out + "/metrics.jsonl");
    ASSERT_EQ(want.size(), static_cast<std::size_t>(elastic.max_steps - from)) << what;
    double worst = 0;
    for (const auto& [step, loss] : want) {
      ASSERT_TRUE(got.count(step)) << what << ": step " << step << " missing";
      worst = std::max(worst, std::fabs(got.at(step) - loss) / std::fabs(loss));
    }
    EXPECT_LE(worst, 1e-6) << what;
    if (std::getenv("LMCORE_PRINT_ERRORS")) std::printf("%s: max relative loss difference %.3g\n", what.c_str(), worst);
  }

  tt::TempDir dir_;
  model::ModelConfig c_;
};

TEST_F(Elastic, KillDuringAForwardTheSurvivorsGoOnFromTheMemoryCheckpoint) {
  TrainOptions o = options("forward", 12);
  o.elastic = true;
  o.checkpoint_every = 2;
  o.memory_checkpoint_every = 2;
  // Rank 1 dies at its second unit all-gather of step 6's forward.
  const auto ev = run_with_kill(o, 1, "fsdp.forward:2", "train.step:6");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["cause"], "failure");
  EXPECT_EQ(ev[0]["at_step"], 5);
  EXPECT_EQ(ev[0]["step"], 4);
  EXPECT_EQ(ev[0]["old_world"], 3);
  EXPECT_EQ(ev[0]["new_world"], 2);
  EXPECT_EQ(ev[0]["lost_ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(ev[0]["source"], "memory snapshot of step 4");
  EXPECT_EQ(ev[0]["kind"], "peer_failure");
  EXPECT_GT(ev[0]["recover_s"].get<double>(), 0);
  const auto end = events(o.out + "/metrics.jsonl", "end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["world_size"], 2);
  expect_two_rank_curve(o, 4, "killed in forward");
  // The report marks the change on the loss curve.
  EXPECT_NE(slurp(o.out + "/report.html").find("3\u21922 ranks"), std::string::npos);
}

TEST_F(Elastic, KillDuringABackwardReduceScatterOnTheSeparateGroup) {
  TrainOptions o = options("backward", 12);
  o.elastic = true;
  o.separate_rs_group = true;
  o.checkpoint_every = 3;
  o.memory_checkpoint_every = 3;
  // Rank 2 dies right after issuing step 5's second reduce-scatter (on the separate group).
  const auto ev = run_with_kill(o, 2, "fsdp.reduce_scatter:2", "train.step:5");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["at_step"], 4);
  EXPECT_EQ(ev[0]["step"], 3);
  EXPECT_EQ(ev[0]["new_world"], 2);
  EXPECT_EQ(ev[0]["lost_ranks"], nlohmann::json::array({2}));
  expect_two_rank_curve(o, 3, "killed with a reduce-scatter in flight");
}

TEST_F(Elastic, KillOfRankZeroInACheckpointWriteLeavesNoHalfCheckpoint) {
  TrainOptions o = options("ckpt", 10);
  o.elastic = true;
  o.checkpoint_every = 2;  // disk only: the survivors go back to the last complete checkpoint
  // Rank 0 (the one that logs and installs checkpoints) dies after writing its shard of step 4's.
  const auto ev = run_with_kill(o, 0, "checkpoint.shard:2", "");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["at_step"], 4);  // step 4 was done, its checkpoint was being written
  EXPECT_EQ(ev[0]["step"], 2);
  EXPECT_EQ(ev[0]["lost_ranks"], nlohmann::json::array({0}));
  EXPECT_NE(ev[0]["source"].get<std::string>().find("disk checkpoint"), std::string::npos) << ev[0];
  // Every checkpoint folder is complete and readable; no temporary folder is left.
  for (const auto& entry : fs::directory_iterator(o.out + "/checkpoints")) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.rfind(".tmp", 0), std::string::npos) << name;
    EXPECT_NO_THROW(CheckpointReader r(entry.path().string())) << name;
  }
  EXPECT_EQ(list_checkpoints(o.out + "/checkpoints").size(), 5u);  // steps 2, 4, ..., 10
  expect_two_rank_curve(o, 2, "killed while writing a checkpoint");
}

TEST_F(Elastic, KillDuringAMemoryCheckpointFallsBackToThePreviousOne) {
  TrainOptions o = options("snapshot", 10);
  o.elastic = true;
  o.checkpoint_every = 5;  // none on disk before the failure
  o.memory_checkpoint_every = 2;
  // Snapshots are taken at the start (step 0) and after steps 2, 4, ...: the 3rd is step 4's. Rank 2 dies
  // after the replicas of step 4 were exchanged, before anyone committed: nobody may use them.
  const auto ev = run_with_kill(o, 2, "elastic.snapshot:3", "");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["at_step"], 4);
  EXPECT_EQ(ev[0]["step"], 2);
  EXPECT_EQ(ev[0]["source"], "memory snapshot of step 2");
  // The state of step 2 from an uninterrupted 3-rank run (the first two steps are the same computation;
  // the same --max-steps, since the learning-rate schedule depends on it).
  TrainOptions first = options("snapshot_uninterrupted", 10);
  first.checkpoint_every = 2;
  ASSERT_TRUE(run_plain(first, 3));
  expect_two_rank_curve(o, 2, "killed in a memory checkpoint", first.out + "/checkpoints/step_00000002");
}

// 4 ranks (global batch 12 keeps at 4, 3 and 2): rank 1 dies in step 5 (back to the memory checkpoint
// of step 4), then rank 3 in step 7, before the next memory checkpoint: the previous one, in the layout
// of 4 ranks, still holds everything (rank 1's shard as rank 0's replica, rank 3's as rank 2's).
TEST_F(Elastic, ASecondFailureBeforeTheNextMemoryCheckpointStillRestoresIt) {
  TrainOptions o = options("twice", 12);
  o.global_batch = 12;
  o.elastic = true;
  o.checkpoint_every = 4;
  o.memory_checkpoint_every = 4;
  // Rank 3's 8th step of its loop is step 7 (steps 5 and 6 are trained again after the first failure).
  const auto ev = run_with_kills(o, 4, {{1, {"fsdp.forward:2", "train.step:5"}}, {3, {"fsdp.forward:2", "train.step:8"}}});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["at_step"], 4);
  EXPECT_EQ(ev[0]["step"], 4);
  EXPECT_EQ(ev[0]["lost_ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(ev[1]["at_step"], 6);
  EXPECT_EQ(ev[1]["step"], 4);
  EXPECT_EQ(ev[1]["old_world"], 3);
  EXPECT_EQ(ev[1]["new_world"], 2);
  EXPECT_EQ(ev[1]["lost_ranks"], nlohmann::json::array({2}));  // old rank 3 was rank 2 of three
  EXPECT_EQ(ev[1]["source"], "memory snapshot of step 4");
  expect_two_rank_curve(o, 4, "two failures");
}

// Two neighbours die at once: rank 2's shard and its only replica (on rank 1) are gone, so the
// survivors fall back to the newest disk checkpoint.
TEST_F(Elastic, NeighboursDyingTogetherFallBackToTheDiskCheckpoint) {
  TrainOptions o = options("neighbours", 10);
  o.global_batch = 12;
  o.elastic = true;
  o.checkpoint_every = 3;
  o.memory_checkpoint_every = 2;  // memory: step 4, disk: step 3
  // Rank 1 dies as step 5 begins and rank 2 as it is about to answer the roll call for that failure,
  // so the survivors find both missing in one roll call. (With both at train.step:5, rank 2 could still
  // be in step 4's last collective when rank 1 died: one rank's collective being done does not mean
  // the others' are. It then answered, took part in a first shrink and died in the next generation.)
  const auto ev = run_with_kills(o, 4, {{1, {"train.step:5", ""}}, {2, {"dist.roll_call:1", ""}}});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["old_world"], 4);
  EXPECT_EQ(ev[0]["new_world"], 2);
  EXPECT_EQ(ev[0]["lost_ranks"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(ev[0]["step"], 3);
  EXPECT_NE(ev[0]["source"].get<std::string>().find("disk checkpoint"), std::string::npos) << ev[0];
  EXPECT_TRUE(ev[0].contains("memory_snapshot_lost")) << ev[0];
  expect_two_rank_curve(o, 3, "two neighbours at once");
}

TEST_F(Elastic, ARestartedRankRejoinsAndTheRunEndsWithThree) {
  TrainOptions o = options("rejoin", 40);
  o.elastic = true;
  o.checkpoint_every = 2;
  o.memory_checkpoint_every = 2;
  const std::string store = dist::testing::fresh_store("elastic-rejoin");
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(start_rank(o, r, 3, store, r == 1 ? "fsdp.forward:2" : "", "train.step:6"));
  // As `lmcore launch --restart-failed` would: start rank 1 again as soon as it died.
  int st = 0;
  ASSERT_EQ(waitpid(pids[1], &st, 0), pids[1]);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << describe_exit(st);
  const pid_t again = start_rank(o, 1, 3, store, "fsdp.forward:2", "train.step:6", /*restart=*/1);
  const auto sts = wait_all({pids[0], pids[2], again}, std::chrono::seconds(120));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(exited_ok(sts[i])) << i << ": " << describe_exit(sts[i]);
  const auto ev = events(o.out + "/metrics.jsonl", "membership");
  ASSERT_EQ(ev.size(), 2u) << slurp(o.out + "/metrics.jsonl");
  EXPECT_EQ(ev[0]["cause"], "failure");
  EXPECT_EQ(ev[0]["new_world"], 2);
  EXPECT_EQ(ev[1]["cause"], "join");
  EXPECT_EQ(ev[1]["old_world"], 2);
  EXPECT_EQ(ev[1]["new_world"], 3);
  EXPECT_EQ(ev[1]["joined"], 1);
  const std::int64_t joined_at = ev[1]["step"].get<std::int64_t>();
  EXPECT_EQ(joined_at % 2, 0);
  const auto end = events(o.out + "/metrics.jsonl", "end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["world_size"], 3);
  EXPECT_EQ(end[0]["step"], 40);
  // After the join the three ranks train as three ranks resumed from that step's checkpoint would.
  TrainOptions ref = o;
  ref.elastic = false;
  ref.memory_checkpoint_every = 0;
  ref.out = o.out + "_ref3";
  ref.resume = o.out + fmt::format("/checkpoints/step_{:08}", joined_at);
  ASSERT_TRUE(run_plain(ref, 3));
  const auto got = losses_by_step(o.out + "/metrics.jsonl"), want = losses_by_step(ref.out + "/metrics.jsonl");
  ASSERT_EQ(want.size(), static_cast<std::size_t>(40 - joined_at));
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-6 * std::fabs(loss)) << "step " << step;
}

TEST_F(Elastic, BelowMinRanksTheSurvivorsStopWithACheckpoint) {
  TrainOptions o = options("minranks", 12);
  o.elastic = true;
  o.min_ranks = 3;
  o.checkpoint_every = 4;
  o.memory_checkpoint_every = 2;  // the memory snapshot (step 6) is newer than the disk one (step 4)
  const std::string store = dist::testing::fresh_store("elastic-min");
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(start_rank(o, r, 3, store, r == 2 ? "fsdp.forward:1" : "", "train.step:8"));
  const auto st = wait_all(pids, std::chrono::seconds(120));
  EXPECT_TRUE(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL) << describe_exit(st[2]);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 1) << r << ": " << describe_exit(st[r]);
    const std::string e = slurp(o.out + fmt::format("/error_{}_0", r));
    EXPECT_NE(e.find("stopping at step 6: 2 rank(s) left, fewer than --min-ranks 3"), std::string::npos) << e;
  }
  // The memory snapshot was written to disk, re-sharded for the two survivors: it resumes.
  const std::string ckpt = o.out + "/checkpoints/step_00000006";
  const CheckpointReader r(ckpt);
  EXPECT_EQ(r.world_size(), 2);
  EXPECT_EQ(r.state().step, 6);
}

TEST_F(Elastic, OptionsThatCannotWorkAreRefusedUpFront) {
  TrainOptions o = options("bad", 4);
  o.elastic = true;
  o.fsdp = false;
  EXPECT_NE(tt::error_of([&] { run_training(o); }).find("--elastic needs --fsdp"), std::string::npos);
  o.fsdp = true;
  EXPECT_NE(tt::error_of([&] { run_training(o); }).find("--elastic needs --checkpoint-every or --memory-checkpoint-every"),
            std::string::npos);
  o.elastic = false;
  o.memory_checkpoint_every = 2;
  EXPECT_NE(tt::error_of([&] { run_training(o); }).find("need --elastic"), std::string::npos);
  // A global batch that two ranks cannot keep (6 sequences of 2 x 2 ranks) is refused at start-up,
  // naming a batch that works.
  o = options("bad2", 4);
  o.elastic = true;
  o.checkpoint_every = 2;
  o.global_batch = 6;
  o.batch_size = 2;
  const std::string store = dist::testing::fresh_store("elastic-bad");
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(start_rank(o, r, 3, store, ""));
  const auto st = wait_all(pids, std::chrono::seconds(60));
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(exited_ok(st[r])) << r;
    const std::string e = slurp(o.out + fmt::format("/error_{}_0", r));
    EXPECT_NE(e.find("is not a multiple of --batch-size 2 x W for W = 2,"), std::string::npos) << e;
    EXPECT_NE(e.find("use --global-batch 12"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace lmcore::train
