// Partial-group recovery: shrink(), reconfigure() and join().
//
// Protocol, all through the store under "<name>/":
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
#include <sstream>

#include "src/dist/membership.h"

namespace lmcore::dist {

namespace detail {

namespace {

struct Decision {
  std::vector<int> members;
  std::int64_t joiners_upto = 0;
};

std::string encode(const Decision& d) {
  return fmt::format("members={};joiners_upto={}", fmt::join(d.members, ","), d.joiners_upto);
}

Decision decode(const std::string& s) {
  Decision d;
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

std::shared_ptr<GroupImpl> reform(GroupImpl& g, const ShrinkOptions& options, bool admit_joiners) {
  const char* opname = admit_joiners ? "reconfigure" : "shrink";
  const auto t0 = Clock::now();
  // 1. Leave the old generation: release any wait still pending, fail queued calls, close the pairs.
  g.mark_broken(fmt::format("{}() was called", opname));
  {
    std::lock_guard<std::mutex> lock(g.active_mu);
    for (auto* b : g.active) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
  g.stop_worker();

  Store& store = *g.group_store;
  const std::string prefix = fmt::format("g{}/", g.generation);
  std::int64_t reached;
  {
    std::lock_guard<std::mutex> lock(g.queue_mu);
    reached = g.next_seq - 1;
  }
  g.answer_roll_call(reached);
  store.set(prefix + "shrink/" + std::to_string(g.rank), opname);
  const auto deadline = t0 + options.window;
  std::vector<int> present;
  std::int64_t joiners_upto = g.join_consumed;
  while (true) {
    present.clear();
    const bool failure_posted = store.check({prefix + "failed"});
    bool all_expected = true;
    for (int p = 0; p < g.size; ++p) {
      const std::string r = std::to_string(p);
      if (store.check({prefix + "shrink/" + r})) {
        present.push_back(p);
      } else if (!failure_posted || store.check({prefix + "alive/" + r})) {
        all_expected = false;
      }
    }
    if (admit_joiners) joiners_upto = store.add("join/next", 0);
    const bool joiners_ok = !admit_joiners || joiners_upto - g.join_consumed >= options.min_joiners;
    if ((all_expected && joiners_ok) || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  // 2. The first proposal wins.
  store.set_if_absent(prefix + "decision", encode({present, joiners_upto}));
  const Decision d = decode(store.get(prefix + "decision", std::chrono::seconds(10)));
  const auto it = std::find(d.members.begin(), d.members.end(), g.rank);
  if (it == d.members.end()) {
    throw DistError(DistErrorKind::broken, opname, -1, {},
                    fmt::format("{}: rank {} of generation {} was left out of generation {} (members agreed: [{}]); "
                                "it arrived after the others had decided (window {} ms)",
                                opname, g.rank, g.generation, g.generation + 1, fmt::join(d.members, ", "),
                                options.window.count()));
  }
  const int new_rank = static_cast<int>(it - d.members.begin());
  const std::int64_t n_join = std::max<std::int64_t>(d.joiners_upto - g.join_consumed, 0);
  const int new_size = static_cast<int>(d.members.size() + static_cast<std::size_t>(n_join));

  // 3. Tell the joiners where they stand (every survivor writes the same values).
  for (std::int64_t t = g.join_consumed + 1; t <= d.joiners_upto; ++t) {
    const int jr = static_cast<int>(d.members.size() + static_cast<std::size_t>(t - g.join_consumed - 1));
    store.set(fmt::format("join/assign/{}", t), fmt::format("{} {} {} {}", g.generation + 1, jr, new_size, d.joiners_upto));
  }
  g.log.event(g.rank, g.generation, opname,
              fmt::format("generation {} -> {}: members [{}] + {} joiners; new rank {} of {}", g.generation,
                          g.generation + 1, fmt::join(d.members, ", "), n_join, new_rank, new_size));
  // The config as it is now, with any set_timeout() since the group was made.
  return make_group(g.config, g.root_store, g.device, new_rank, new_size, g.generation + 1, d.joiners_upto);
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
  const std::int64_t ticket = gs->add("join/next", 1);
  gs->set(fmt::format("join/ticket/{}", ticket), config.host);
  std::string assign;
  try {
    assign = gs->get(fmt::format("join/assign/{}", ticket), wait);
  } catch (const StoreError& e) {
    throw DistError(DistErrorKind::timeout, "join", -1, {},
                    fmt::format("join: group '{}' did not admit this process (ticket {}) within {} ms: no member "
                                "called reconfigure() ({})",
                                config.name, ticket, wait.count(), e.what()));
  }
  int gen = 0, rank = 0, size = 0;
  long long consumed = 0;
  LMCORE_CHECK(std::sscanf(assign.c_str(), "%d %d %d %lld", &gen, &rank, &size, &consumed) == 4,
               "join: malformed assignment '{}' for ticket {}", assign, ticket);
  return ProcessGroup(detail::make_group(config, root, nullptr, rank, size, gen, consumed));
}

}  // namespace lmcore::dist
