// Membership: the watcher, the roll call, and partial-group recovery (shrink(), reconfigure(),
// join()).
//
// Recovery protocol, all through the store under "<name>/":
//  1. Each survivor of generation g writes "g<g>/alive/<rank>" and "g<g>/shrink/<rank>" and waits
//     until every expected rank has arrived ("shrink/<rank>"), or `window` passes. After a failure
//     was posted ("g<g>/failed"), the expected ranks are those that answered its roll call
//     ("alive/<rank>": every live rank's watcher answers within ~50 ms), so a dead rank costs no
//     wait and a live but slow one is waited for; otherwise every rank is expected.
//     reconfigure() also waits for `min_joiners` restarted ranks, which took tickets from the
//     counter "join/next".
//  2. Each survivor proposes what it saw with set_if_absent("g<g>/decision", ...). The first
//     proposal wins and every survivor adopts it, so all agree even if their views differed.
//  3. New ranks: the listed survivors in order of old rank, then the admitted joiners in ticket
//     order. Survivors write "join/assign/<ticket>" for each joiner, then everyone connects
//     generation g+1, whose keys ("g<g+1>/mesh/...") and connections are new.
#include "src/dist/membership.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "lmcore/core/fault_injection.h"
#include "src/dist/group_impl.h"

namespace lmcore::dist {

namespace detail {

namespace {

std::string encode(const Membership::Decision& d) {
  return fmt::format("members={};joiners_upto={}", fmt::join(d.members, ","), d.joiners_upto);
}

Membership::Decision decode(const std::string& s) {
  Membership::Decision d;
  const auto semi = s.find(';');
  LMCORE_CHECK(s.rfind("members=", 0) == 0 && semi != std::string::npos, "reconfigure: malformed decision '{}'", s);
  std::stringstream ms(s.substr(8, semi - 8));
  std::string item;
  while (std::getline(ms, item, ',')) {
    if (!item.empty()) d.members.push_back(std::stoi(item));
  }
  const std::string rest = s.substr(semi + 1);
  LMCORE_CHECK(rest.rfind("joiners_upto=", 0) == 0, "reconfigure: malformed decision '{}'", s);
  d.joiners_upto = std::stoll(rest.substr(13));
  return d;
}

}  // namespace

std::string Membership::key(const std::string& rest) const { return fmt::format("g{}/{}", generation_, rest); }

// ---- the watcher ----

void Membership::start_watcher(std::function<std::int64_t()> reached, std::function<void()> on_failure) {
  if (size_ <= 1) return;
  watcher_ = std::thread([this, reached = std::move(reached), on_failure = std::move(on_failure)] {
    watcher_loop(reached, on_failure);
  });
}

void Membership::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(watcher_mu_);
    stopping_ = true;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable() && watcher_.get_id() != std::this_thread::get_id()) watcher_.join();
}

void Membership::watcher_loop(const std::function<std::int64_t()>& reached, const std::function<void()>& on_failure) {
  // Polls whether or not a call is running: an idle or lagging rank must answer the roll call too,
  // or the survivors would name it as missing and leave it out of the next generation.
  const std::string failed_key = key("failed");
  std::unique_lock<std::mutex> lock(watcher_mu_);
  while (!stopping_) {
    watcher_cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (stopping_ || failure_posted_.load()) continue;
    lock.unlock();
    const std::int64_t last = reached();
    bool failed = false;
    try {
      failed = store_->check({failed_key});
    } catch (const std::exception&) {
      // an unreachable store is not a peer failure; the call's own deadline still bounds it
    }
    if (failed) {
      failure_posted_ = true;
      on_failure();
      try {
        answer(last);
      } catch (const std::exception&) {
        // the failing call's own roll call reports the unreachable store
      }
    }
    lock.lock();
  }
}

// ---- the roll call ----

void Membership::answer(std::int64_t reached, bool failed_there) {
  fault_point("dist.roll_call");  // a rank that dies here is missing from the roll call, deterministically
  // Serialised and monotonic: the watcher's answer, computed before the failing call's own, must not
  // overwrite it with a lower sequence number.
  std::lock_guard<std::mutex> lock(answer_mu_);
  if (reached >= answered_) answered_failed_ = failed_there || (reached == answered_ && answered_failed_);
  answered_ = std::max(answered_, reached);
  store_->set(key(fmt::format("alive/{}", rank_)), fmt::format("{}{}", answered_, answered_failed_ ? " failed" : ""));
}

void Membership::report_failure(std::int64_t seq) {
  answer(seq, true);
  store_->set(key("failed"), std::to_string(rank_));
}

// The roll call reads the others' answers ("g<gen>/alive/<rank>" = the last sequence number that rank
// reached; this rank answered in report_failure, before it closed its connections).
//  * A rank that answered with a sequence number >= op.seq took part in the failed collective.
//  * A rank that answered with a lower one is alive but had not reached it. Before the deadline it
//    may still be on its way, so it is waited for (at most kArrivalWindow); after the deadline it is
//    the reason for it, unless its own collective there failed ("<seq> failed"): the failure held it
//    back, it is alive.
//  * A rank that did not answer at all is dead, frozen or cut off. Every live rank answers quickly:
//    one that failed in the call answers before closing its connections, so when a connection reset
//    reached this rank the peer behind it had either answered already or died; one whose calls are
//    still fine answers through its watcher within ~50 ms of "g<gen>/failed" appearing. So after a
//    connection failure a silent rank is given kResetGrace, and after a deadline kSilentGrace: the
//    error arrives within ~0.3 s of a reset and within timeout + ~0.5 s when a peer goes silent.
// p2p counters are per peer, so any answer counts there.
std::vector<int> Membership::roll_call(const OpDesc& op, bool connection_failed, std::string* note) {
  constexpr auto kArrivalWindow = std::chrono::milliseconds(2000);
  constexpr auto kResetGrace = std::chrono::milliseconds(300);
  constexpr auto kSilentGrace = std::chrono::milliseconds(500);
  const auto now = Clock::now();
  const auto arrival_until = std::min(now + kArrivalWindow, op.deadline);
  const auto silent_until = now + (connection_failed ? kResetGrace : kSilentGrace);
  const std::int64_t need = is_p2p(op.kind) ? std::numeric_limits<std::int64_t>::min() : op.seq;
  std::vector<int> missing;
  try {
    while (true) {
      missing.clear();
      bool waiting = false;
      const auto t = Clock::now();
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        const auto reply = store_->try_get(key(fmt::format("alive/{}", p)));
        std::int64_t reached = std::numeric_limits<std::int64_t>::min();
        if (reply) {
          try {
            reached = std::stoll(*reply);
          } catch (const std::exception&) {
          }
        }
        if (reply && (reached >= need || reply->find("failed") != std::string::npos)) continue;
        missing.push_back(p);
        if (reply ? t < arrival_until : t < silent_until) waiting = true;
      }
      if (!waiting) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception& e) {
    missing.clear();
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) missing.push_back(p);
    }
    if (note) *note = fmt::format(" (the store is unreachable from this rank: {})", e.what());
  }
  return missing;
}

// ---- the next generation ----

Membership::Decision Membership::agree_on_next(std::int64_t reached, std::chrono::milliseconds window,
                                               bool admit_joiners, int min_joiners, std::int64_t join_consumed,
                                               const char* opname) {
  // 1. Arrive, and wait for the expected ranks (and joiners) or the window.
  const auto deadline = Clock::now() + window;
  answer(reached);
  store_->set(key(fmt::format("shrink/{}", rank_)), opname);
  std::vector<int> present;
  std::int64_t joiners_upto = join_consumed;
  while (true) {
    present.clear();
    const bool failure = store_->check({key("failed")});
    bool all_expected = true;
    for (int p = 0; p < size_; ++p) {
      if (store_->check({key(fmt::format("shrink/{}", p))})) {
        present.push_back(p);
      } else if (!failure || store_->check({key(fmt::format("alive/{}", p))})) {
        all_expected = false;
      }
    }
    if (admit_joiners) joiners_upto = store_->add("join/next", 0);
    const bool joiners_ok = !admit_joiners || joiners_upto - join_consumed >= min_joiners;
    if ((all_expected && joiners_ok) || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // 2. The first proposal wins.
  store_->set_if_absent(key("decision"), encode({present, joiners_upto}));
  return decode(store_->get(key("decision"), std::chrono::seconds(10)));
}

void Membership::assign_joiners(const Decision& d, std::int64_t join_consumed) {
  // Every survivor writes the same values.
  const std::int64_t n_join = std::max<std::int64_t>(d.joiners_upto - join_consumed, 0);
  const int new_size = static_cast<int>(d.members.size() + static_cast<std::size_t>(n_join));
  for (std::int64_t t = join_consumed + 1; t <= d.joiners_upto; ++t) {
    const int jr = static_cast<int>(d.members.size() + static_cast<std::size_t>(t - join_consumed - 1));
    store_->set(fmt::format("join/assign/{}", t), fmt::format("{} {} {} {}", generation_ + 1, jr, new_size, d.joiners_upto));
  }
}

Membership::Admission Membership::request_admission(Store& group_store, const std::string& group_name,
                                                    const std::string& host, std::chrono::milliseconds wait) {
  const std::int64_t ticket = group_store.add("join/next", 1);
  group_store.set(fmt::format("join/ticket/{}", ticket), host);
  std::string assign;
  try {
    assign = group_store.get(fmt::format("join/assign/{}", ticket), wait);
  } catch (const StoreError& e) {
    throw DistError(DistErrorKind::timeout, "join", -1, {},
                    fmt::format("join: group '{}' did not admit this process (ticket {}) within {} ms: no member "
                                "called reconfigure() ({})",
                                group_name, ticket, wait.count(), e.what()));
  }
  Admission a;
  long long upto = 0;
  LMCORE_CHECK(std::sscanf(assign.c_str(), "%d %d %d %lld", &a.generation, &a.rank, &a.world_size, &upto) == 4,
               "join: malformed assignment '{}' for ticket {}", assign, ticket);
  a.joiners_upto = upto;
  return a;
}

// shrink (admit_joiners false) and reconfigure (true).
std::shared_ptr<GroupImpl> reform(GroupImpl& g, const ShrinkOptions& options, bool admit_joiners) {
  const char* opname = admit_joiners ? "reconfigure" : "shrink";
  // 1. Leave the old generation: release any wait still pending, fail queued calls, close the pairs.
  g.mark_broken(fmt::format("{}() was called", opname));
  g.transport->interrupt();
  g.stop_worker();
  // 2. Agree with the other survivors on the members of the next generation.
  const Membership::Decision d = g.membership->agree_on_next(g.last_issued(), options.window, admit_joiners,
                                                             options.min_joiners, g.join_consumed, opname);
  const auto it = std::find(d.members.begin(), d.members.end(), g.rank);
  if (it == d.members.end()) {
    throw DistError(DistErrorKind::broken, opname, -1, {},
                    fmt::format("{}: rank {} of generation {} was left out of generation {} (members agreed: [{}]); "
                                "it arrived after the others had decided (window {} ms)",
                                opname, g.rank, g.generation, g.generation + 1, fmt::join(d.members, ", "),
                                options.window.count()));
  }
  // 3. New ranks: the members in order of old rank, then the joiners, who learn their places.
  const int new_rank = static_cast<int>(it - d.members.begin());
  const std::int64_t n_join = std::max<std::int64_t>(d.joiners_upto - g.join_consumed, 0);
  const int new_size = static_cast<int>(d.members.size() + static_cast<std::size_t>(n_join));
  g.membership->assign_joiners(d, g.join_consumed);
  g.log.event(g.rank, g.generation, opname,
              fmt::format("generation {} -> {}: members [{}] + {} joiners; new rank {} of {}", g.generation,
                          g.generation + 1, fmt::join(d.members, ", "), n_join, new_rank, new_size));
  // 4. Connect the next generation, with the config as it is now (any set_timeout() included).
  return make_group(g.config, g.root_store, g.transport->device(), new_rank, new_size, g.generation + 1, d.joiners_upto);
}

}  // namespace detail

ProcessGroup ProcessGroup::shrink(const ShrinkOptions& options) {
  return ProcessGroup(detail::reform(*impl_, options, false));
}

ProcessGroup ProcessGroup::reconfigure(const ShrinkOptions& options) {
  return ProcessGroup(detail::reform(*impl_, options, true));
}

ProcessGroup ProcessGroup::join(GroupOptions options, std::chrono::milliseconds wait) {
  const detail::GroupConfig config = detail::GroupConfig::resolve(options);
  auto root = open_store(config.store_url, std::chrono::milliseconds(1000));
  auto gs = prefix_store(root, config.name + "/");
  const auto a = detail::Membership::request_admission(*gs, config.name, config.host, wait);
  return ProcessGroup(detail::make_group(config, root, nullptr, a.rank, a.world_size, a.generation, a.joiners_upto));
}

}  // namespace lmcore::dist
