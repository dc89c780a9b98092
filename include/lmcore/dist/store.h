// lmcore/dist/store.h — the key-value store that ranks meet through.
//
// Process groups use a store for three things: exchanging Gloo's pair addresses at rendezvous, the
// roll call after a failure (who is still alive), and agreeing on the next generation's membership
// in shrink()/reconfigure(). Two implementations:
//   file:///some/dir      one machine: one file per key in a shared directory (atomic rename/link)
//   redis://host:port     several machines: Debian's redis-server
//
//   auto store = lmcore::dist::open_store("file:///tmp/job42");
//   store->set("greeting", "hello");
//   if (store->wait({"greeting"}, std::chrono::seconds(5))) std::string v = *store->try_get("greeting");
//
// Every operation is bounded: a Redis command that gets no answer within `op_timeout` throws
// StoreError, so a rank whose link to the store is cut errors out instead of hanging.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/core/error.h"

namespace lmcore::dist {

// The store could not be reached or answered badly (network, file system).
class StoreError : public Error {
 public:
  using Error::Error;
};

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value (overwrites).
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when the key does not exist.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Creates key with value only if it does not exist yet. True when this call created it: the
  // first writer wins, which is how ranks agree on one decision.
  virtual bool set_if_absent(const std::string& key, const std::string& value) = 0;
  // Atomically adds delta to the integer at key (missing = 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // True when every key exists.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // A short description for messages ("file:///tmp/x").
  virtual std::string url() const = 0;

  // Polls until every key exists (true) or the timeout passes (false).
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Waits for the key and returns its value; throws StoreError naming the key on timeout.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
};

// Opens "file:///path" (creating the directory) or "redis://host:port". Throws Error naming the URL
// when the scheme is unknown or the store cannot be reached.
std::shared_ptr<Store> open_store(const std::string& url,
                                  std::chrono::milliseconds op_timeout = std::chrono::seconds(2));

// Checks the form of a store URL without opening anything (what open_store would refuse before
// touching the file system or the network), with messages that start with `what`: the launcher
// refuses a bad --store before it starts any rank.
void check_store_url(const std::string& url, std::string_view what);

// A view of `base` that prepends `prefix` to every key: groups, generations and roll calls each get
// their own key space.
std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> base, const std::string& prefix);

}  // namespace lmcore::dist
