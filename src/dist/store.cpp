// Store: the polling helpers shared by every implementation, the URL parser, and the prefix view.
#include "lmcore/dist/store.h"

#include <thread>

#include "lmcore/base/url.h"
#include "src/dist/store_impl.h"

namespace lmcore::dist {

bool Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Start fast (rendezvous is latency-bound) and back off to 10 ms so idle waiters stay cheap.
  auto pause = std::chrono::microseconds(200);
  while (true) {
    if (check(keys)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (!wait({key}, timeout)) {
    throw StoreError(fmt::format("store {}: key '{}' did not appear within {} ms", url(), key, timeout.count()));
  }
  auto v = try_get(key);
  if (!v) throw StoreError(fmt::format("store {}: key '{}' vanished after it appeared", url(), key));
  return *v;
}

namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override { base_->set(prefix_ + key, value); }
  std::optional<std::string> try_get(const std::string& key) override { return base_->try_get(prefix_ + key); }
  bool set_if_absent(const std::string& key, const std::string& value) override {
    return base_->set_if_absent(prefix_ + key, value);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return base_->check(full);
  }
  std::string url() const override { return base_->url() + " [" + prefix_ + "]"; }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

namespace {

// The parsed URL of a store, or an Error naming it when open_store could not open that kind.
base::Url checked_store_url(const std::string& url, std::string_view what) {
  base::Url u = base::parse_url(url, what);
  if (u.scheme == "file") {
    LMCORE_CHECK(u.host.empty() && !u.path.empty() && !u.port,
                 "{}: '{}': expected file:///absolute/path (three slashes, no host)", what, url);
  } else if (u.scheme == "redis") {
    LMCORE_CHECK(!u.host.empty(), "{}: '{}': expected redis://host:port", what, url);
    LMCORE_CHECK(u.path.empty() || u.path == "/", "{}: '{}': a redis store takes no path, found '{}'", what, url,
                 u.path);
  } else {
    fail("{}: '{}': unknown store '{}', expected file:///path or redis://host:port", what, url, u.scheme);
  }
  return u;
}

}  // namespace

void check_store_url(const std::string& url, std::string_view what) { (void)checked_store_url(url, what); }

std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds op_timeout) {
  const base::Url u = checked_store_url(url, "open_store");
  if (u.scheme == "file") return detail::make_file_store(u.path);
  return detail::make_redis_store(u.host, u.port.value_or(detail::kRedisDefaultPort), op_timeout);
}

}  // namespace lmcore::dist
