// The file and Redis stores: set/get, first-writer-wins, atomic add across processes, bounded waits;
// and a process group over Redis (redis-server started here on loopback, random port).
#include <gtest/gtest.h>

#include <random>

#include "lmcore/dist/process_group.h"
#include "lmcore/dist/store.h"
#include "tests/base/base_test_util.h"
#include "tests/dist/multiprocess.h"

namespace lmcore::dist {
namespace {

// Starts redis-server on 127.0.0.1 and a random free port; stops it on destruction.
class RedisServer {
 public:
  RedisServer() {
    std::mt19937 rng(static_cast<unsigned>(getpid()) * 2654435761u ^ static_cast<unsigned>(time(nullptr)));
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = 20000 + static_cast<int>(rng() % 30000);
      const std::string port = std::to_string(port_);
      const pid_t pid = fork();
      if (pid == 0) {
        execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
        _exit(127);
      }
      // Ready when it answers; gone when the port was taken.
      for (int i = 0; i < 200; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        try {
          open_store(url(), std::chrono::milliseconds(200))->set("ping", "1");
          pid_ = pid;
          break;
        } catch (const std::exception&) {
        }
      }
    }
  }
  ~RedisServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return pid_ > 0; }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}", port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

void exercise_store(const std::string& url) {
  auto s = open_store(url);
  EXPECT_FALSE(s->try_get("a/b c").has_value());
  s->set("a/b c", std::string("x\0y", 3));
  EXPECT_EQ(*s->try_get("a/b c"), std::string("x\0y", 3));
  s->set("a/b c", "overwritten");
  EXPECT_EQ(s->get("a/b c", std::chrono::milliseconds(100)), "overwritten");
  EXPECT_TRUE(s->set_if_absent("once", "first"));
  EXPECT_FALSE(s->set_if_absent("once", "second"));
  EXPECT_EQ(*s->try_get("once"), "first");
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -2), 3);
  EXPECT_TRUE(s->check({"once", "n"}));
  EXPECT_FALSE(s->check({"once", "missing"}));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s->wait({"missing"}, std::chrono::milliseconds(100)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  EXPECT_THROW(s->get("missing", std::chrono::milliseconds(50)), StoreError);
  auto p = prefix_store(s, "job1/");
  p->set("k", "v");
  EXPECT_EQ(*s->try_get("job1/k"), "v");
  EXPECT_FALSE(p->try_get("once").has_value());

  // add() and set_if_absent() are atomic across processes.
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    pids.push_back(testing::spawn([&, i] {
      auto st = open_store(url);
      for (int k = 0; k < 25; ++k) st->add("counter", 1);
      if (st->set_if_absent("winner", std::to_string(i))) st->add("winners", 1);
    }, "adder"));
  }
  for (int st : testing::wait_all(pids)) EXPECT_TRUE(testing::exited_ok(st));
  EXPECT_EQ(s->add("counter", 0), 100);
  EXPECT_EQ(s->add("winners", 0), 1);
}

TEST(Store, FileStore) { exercise_store(testing::fresh_store("store")); }

TEST(Store, RedisStore) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << "could not start redis-server on loopback";
  exercise_store(redis.url());
}

TEST(Store, BadUrlsAreRejectedWithTheUrl) {
  try {
    open_store("http://x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("http://x"), std::string::npos);
  }
  EXPECT_THROW(open_store("file://relative"), Error);
  EXPECT_THROW(open_store("redis://host:notaport"), Error);
  // One parser (base::parse_url) for every store URL: std::stoi used to read "6379x" as 6379.
  try {
    open_store("redis://host:6379x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "open_store: 'redis://host:6379x': port '6379x' is not a number from 1 to 65535");
  }
  EXPECT_THROW(open_store("redis://host:6379/db"), Error);
  EXPECT_THROW(open_store("file://host/dir"), Error);
  // Nothing listens on port 1: a bounded failure, not a hang.
  EXPECT_THROW(open_store("redis://127.0.0.1:1", std::chrono::milliseconds(300)), StoreError);
}

TEST(Store, ProcessGroupOverRedis) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok());
  const std::string url = redis.url();
  EXPECT_TRUE(testing::run_ranks(3, [&](int r) {
    ProcessGroup pg(testing::group_options(r, 3, url));
    Tensor t = Tensor::full({10}, r, DType::i32);
    pg.all_reduce(t, testing::reduce_options(ReduceOp::max));
    RANK_CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>(10, 2), "max over redis group");
  }));
}

TEST(ProcessGroupEnv, ReadsRankWorldSizeAndStoreFromTheEnvironment) {
  const std::string store = testing::fresh_store("env");
  EXPECT_TRUE(testing::run_ranks(2, [&](int r) {
    setenv("LMCORE_RANK", std::to_string(r).c_str(), 1);
    setenv("LMCORE_WORLD_SIZE", "2", 1);
    setenv("LMCORE_STORE", store.c_str(), 1);
    ProcessGroup pg = ProcessGroup::from_env();
    RANK_CHECK(pg.rank() == r && pg.world_size() == 2, "from_env gave rank {} of {}", pg.rank(), pg.world_size());
    pg.barrier();
  }));
  unsetenv("LMCORE_RANK");
  GroupOptions bad;
  bad.rank = 3;
  bad.world_size = 2;
  bad.store_url = store;
  try {
    ProcessGroup pg(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
}

// A value that is not wholly an integer in range is refused with its name: "30s" used to be read as 30
// (milliseconds, where seconds were meant) and "1x" as rank 1.
TEST(ProcessGroupEnv, RefusesValuesThatAreNotWhollyIntegersInRange) {
  const std::string store = testing::fresh_store("env-bad");
  const std::pair<const char*, const char*> bad[] = {
      {"LMCORE_DIST_TIMEOUT_MS", "30s"},         {"LMCORE_DIST_TIMEOUT_MS", "-5"},
      {"LMCORE_DIST_TIMEOUT_MS", "2.5"},         {"LMCORE_DIST_CONNECT_TIMEOUT_MS", "99999999999"},
      {"LMCORE_DIST_TRACE_SIZE", "2000000000"},  {"LMCORE_DIST_TRACE_SIZE", "0"},
      {"LMCORE_RANK", "0x"},                     {"LMCORE_WORLD_SIZE", " "}};
  for (const auto& [name, value] : bad) {
    GroupOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.store_url = store;
    if (std::string(name) == "LMCORE_RANK" || std::string(name) == "LMCORE_WORLD_SIZE") o.rank = o.world_size = -1;
    setenv("LMCORE_RANK", "0", 1);
    setenv("LMCORE_WORLD_SIZE", "1", 1);
    setenv(name, value, 1);
    try {
      ProcessGroup pg(o);
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "='" + value + "' is not an integer in ["),
                std::string::npos)
          << e.what();
    }
    unsetenv(name);
    unsetenv("LMCORE_RANK");
    unsetenv("LMCORE_WORLD_SIZE");
  }
}

// A script started without the launcher: the error says what is missing and how ranks are started
// (it said "world_size -1 (LMCORE_WORLD_SIZE) must be >= 1").
TEST(ProcessGroupEnv, MissingRankOrWorldSizePointsAtTheLauncher) {
  unsetenv("LMCORE_RANK");
  unsetenv("LMCORE_WORLD_SIZE");
  GroupOptions o;
  o.store_url = testing::fresh_store("env-missing");
  const auto error = [&] { return base::testing::error_of([&] { ProcessGroup pg(o); }); };
  std::string e = error();
  EXPECT_NE(e.find("no world size: LMCORE_WORLD_SIZE is not set and none was passed (start the ranks with "
                   "`lmcore launch --nproc N -- ...`"),
            std::string::npos)
      << e;
  o.world_size = 2;
  e = error();
  EXPECT_NE(e.find("no rank: LMCORE_RANK is not set and none was passed"), std::string::npos) << e;
  o.world_size = 0, o.rank = 0;
  e = error();
  EXPECT_NE(e.find("world_size 0 (passed) must be >= 1"), std::string::npos) << e;
}

}  // namespace
}  // namespace lmcore::dist
