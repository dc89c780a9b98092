// The Redis store (several machines): plain SET/GET/EXISTS/SETNX/INCRBY over one hiredis connection
// guarded by a mutex. Every command has a socket timeout; after an error the connection is dropped
// and the next command reconnects, so a store outage fails calls quickly instead of hanging them.
#include <hiredis/hiredis.h>

#include <mutex>

#include "src/dist/store_impl.h"

namespace lmcore::dist::detail {

namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisStore final : public Store {
 public:
  RedisStore(std::string host, int port, std::chrono::milliseconds op_timeout)
      : host_(std::move(host)), port_(port), timeout_(op_timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    connect_locked();
  }
  ~RedisStore() override {
    if (ctx_) redisFree(ctx_);
  }

  void set(const std::string& key, const std::string& value) override {
    Reply r = command("SET", "SET %b %b", key.data(), key.size(), value.data(), value.size());
    expect_status(r, "SET", key);
  }

  std::optional<std::string> try_get(const std::string& key) override {
    Reply r = command("GET", "GET %b", key.data(), key.size());
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    if (r->type != REDIS_REPLY_STRING) bad_reply(r, "GET", key);
    return std::string(r->str, r->len);
  }

  bool set_if_absent(const std::string& key, const std::string& value) override {
    Reply r = command("SETNX", "SETNX %b %b", key.data(), key.size(), value.data(), value.size());
    if (r->type != REDIS_REPLY_INTEGER) bad_reply(r, "SETNX", key);
    return r->integer == 1;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    Reply r = command("INCRBY", "INCRBY %b %lld", key.data(), key.size(), static_cast<long long>(delta));
    if (r->type != REDIS_REPLY_INTEGER) bad_reply(r, "INCRBY", key);
    return r->integer;
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) {
      Reply r = command("EXISTS", "EXISTS %b", key.data(), key.size());
      if (r->type != REDIS_REPLY_INTEGER) bad_reply(r, "EXISTS", key);
      if (r->integer == 0) return false;
    }
    return true;
  }

  std::string url() const override { return fmt::format("redis://{}:{}", host_, port_); }

 private:
  void connect_locked() {
    if (ctx_) {
      redisFree(ctx_);
      ctx_ = nullptr;
    }
    timeval tv{static_cast<time_t>(timeout_.count() / 1000), static_cast<suseconds_t>((timeout_.count() % 1000) * 1000)};
    ctx_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
    if (ctx_ == nullptr || ctx_->err) {
      const std::string why = ctx_ ? ctx_->errstr : "out of memory";
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      throw StoreError(fmt::format("redis store {}: cannot connect: {}", url(), why));
    }
    redisSetTimeout(ctx_, tv);
  }

  template <typename... Args>
  Reply command(const char* name, const char* format, Args... args) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_) connect_locked();
    auto* raw = static_cast<redisReply*>(redisCommand(ctx_, format, args...));
    if (raw == nullptr) {
      const std::string why = ctx_->errstr;
      redisFree(ctx_);  // a timed-out connection may deliver a stale reply later: start afresh
      ctx_ = nullptr;
      throw StoreError(fmt::format("redis store {}: {} failed: {}", url(), name, why));
    }
    return Reply(raw);
  }

  void expect_status(const Reply& r, const char* cmd, const std::string& key) {
    if (r->type != REDIS_REPLY_STATUS) bad_reply(r, cmd, key);
  }
  [[noreturn]] void bad_reply(const Reply& r, const char* cmd, const std::string& key) {
    const std::string text = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : fmt::format("type {}", r->type);
    throw StoreError(fmt::format("redis store {}: {} '{}': unexpected reply {}", url(), cmd, key, text));
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
};

}  // namespace

std::shared_ptr<Store> make_redis_store(const std::string& host, int port, std::chrono::milliseconds op_timeout) {
  return std::make_shared<RedisStore>(host, port, op_timeout);
}

}  // namespace lmcore::dist::detail
