// The flight recorder's ring buffer and its JSON form.
#include <chrono>

#include <nlohmann/json.hpp>

#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "src/dist/flight_recorder_impl.h"

namespace lmcore::dist {

namespace detail {

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void FlightRecorder::set_capacity(std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t cap = std::max<std::size_t>(capacity, 1);
  ring_.assign(cap, TraceEntry{});
  ids_.assign(cap, 0);
}

std::size_t FlightRecorder::record(TraceEntry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t id = next_id_++;
  const std::size_t slot = id % ring_.size();
  ring_[slot] = std::move(entry);
  ids_[slot] = id;
  return id;
}

TraceEntry* FlightRecorder::find(std::size_t id) {
  const std::size_t slot = id % ring_.size();
  return ids_[slot] == id ? &ring_[slot] : nullptr;  // overwritten by newer calls: nothing to update
}

void FlightRecorder::mark_started(std::size_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (TraceEntry* e = find(id)) {
    e->state = "started";
    e->t_start = wall_seconds();
  }
}

void FlightRecorder::mark_finished(std::size_t id, bool ok, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (TraceEntry* e = find(id)) {
    e->state = ok ? "completed" : "failed";
    e->t_end = wall_seconds();
    e->error = error;
  }
}

std::vector<TraceEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::size_t, const TraceEntry*>> live;
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    if (ids_[i] != 0) live.emplace_back(ids_[i], &ring_[i]);
  }
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<TraceEntry> out;
  out.reserve(live.size());
  for (const auto& [id, e] : live) out.push_back(*e);
  return out;
}

}  // namespace detail

std::string trace_dump_to_json(const TraceDump& dump) {
  nlohmann::json entries = nlohmann::json::array();
  for (const TraceEntry& e : dump.entries) {
    entries.push_back({{"seq", e.seq},         {"op", e.op},           {"kind", e.kind},
                       {"peer", e.peer},       {"dtype", e.dtype},     {"count_in", e.count_in},
                       {"count_out", e.count_out}, {"bytes", e.bytes}, {"state", e.state},
                       {"t_enqueue", e.t_enqueue}, {"t_start", e.t_start}, {"t_end", e.t_end},
                       {"error", e.error}});
  }
  nlohmann::json j = {{"format", "lmcore-dist-trace"}, {"version", 1},
                      {"group", dump.group},           {"rank", dump.rank},
                      {"world_size", dump.world_size}, {"generation", dump.generation},
                      {"reason", dump.reason},         {"entries", entries}};
  return j.dump(1);
}

TraceDump parse_trace_dump(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const std::exception& e) {
    fail("trace dump '{}': not JSON: {}", source, e.what());
  }
  auto field = [&](const nlohmann::json& obj, const char* name, const char* where) -> const nlohmann::json& {
    LMCORE_CHECK(obj.is_object() && obj.contains(name), "trace dump '{}': {} has no field '{}'", source, where, name);
    return obj.at(name);
  };
  LMCORE_CHECK(j.is_object() && j.value("format", "") == "lmcore-dist-trace",
               "trace dump '{}': expected \"format\": \"lmcore-dist-trace\"", source);
  TraceDump d;
  d.source = source;
  try {
    d.group = field(j, "group", "the dump").get<std::string>();
    d.rank = field(j, "rank", "the dump").get<int>();
    d.world_size = field(j, "world_size", "the dump").get<int>();
    d.generation = field(j, "generation", "the dump").get<int>();
    d.reason = j.value("reason", "");
    const auto& entries = field(j, "entries", "the dump");
    LMCORE_CHECK(entries.is_array(), "trace dump '{}': 'entries' is not an array", source);
    for (const auto& e : entries) {
      TraceEntry t;
      t.seq = field(e, "seq", "an entry").get<std::int64_t>();
      t.op = field(e, "op", "an entry").get<std::string>();
      t.kind = e.value("kind", "collective");
      t.peer = e.value("peer", -1);
      t.dtype = e.value("dtype", "");
      t.count_in = e.value("count_in", std::int64_t{0});
      t.count_out = e.value("count_out", std::int64_t{0});
      t.bytes = e.value("bytes", std::int64_t{0});
      t.state = field(e, "state", "an entry").get<std::string>();
      t.t_enqueue = e.value("t_enqueue", 0.0);
      t.t_start = e.value("t_start", 0.0);
      t.t_end = e.value("t_end", 0.0);
      t.error = e.value("error", "");
      d.entries.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("trace dump '{}': a field has the wrong type: {}", source, e.what());
  }
  LMCORE_CHECK(d.rank >= 0 && d.rank < d.world_size, "trace dump '{}': rank {} is outside world_size {}", source,
               d.rank, d.world_size);
  return d;
}

TraceDump load_trace_dump(const std::string& path) {
  // A regular file of bounded size: a FIFO given by mistake made `lmcore trace` wait forever.
  return parse_trace_dump(base::read_file(path, "trace dump", std::size_t{1} << 30), path);
}

}  // namespace lmcore::dist
