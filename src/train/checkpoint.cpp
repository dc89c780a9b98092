#include "lmcore/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/base/atomic_file.h"
#include "lmcore/base/file.h"
#include "lmcore/core/error.h"
#include "lmcore/core/fault_injection.h"
#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/model/checkpoint.h"
#include "lmcore/version.h"

namespace lmcore::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A checkpoint that is not on disk when the step is reported saved is lost data: fsync failures are errors.
void fsync_path(const fs::path& p, bool directory) {
  if (const int err = base::fsync_path(p.string(), directory); err != 0)
    fail("checkpoint: fsync of '{}' failed: {}", p.string(), errno_text(err));
}

std::string step_name(std::int64_t step) { return fmt::format("step_{:08}", step); }

bool is_step_name(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_plain(const fs::path& dir) {
  return fs::is_regular_file(dir / "model.safetensors") && fs::is_regular_file(dir / "config.json") &&
         fs::is_regular_file(dir / "train_state.safetensors");
}
bool is_sharded(const fs::path& dir) {
  return fs::is_regular_file(dir / "manifest.json") && fs::is_regular_file(dir / "config.json");
}
bool is_complete(const fs::path& dir) { return is_plain(dir) || is_sharded(dir); }

std::int64_t parse_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& file) {
  const auto it = meta.find(key);
  LMCORE_CHECK(it != meta.end(), "checkpoint '{}': metadata key '{}' is missing", file, key);
  try {
    std::size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  fail("checkpoint '{}': metadata '{}' = '{}' is not an integer", file, key, it->second);
}

// Shape-determining fields of two configs; the first that differs, or "".
std::string config_difference(const model::ModelConfig& a, const model::ModelConfig& b) {
  if (a.vocab_size != b.vocab_size) return fmt::format("vocab_size {} vs {}", a.vocab_size, b.vocab_size);
  if (a.dim != b.dim) return fmt::format("hidden_size {} vs {}", a.dim, b.dim);
  if (a.n_layers != b.n_layers) return fmt::format("num_hidden_layers {} vs {}", a.n_layers, b.n_layers);
  if (a.n_heads != b.n_heads) return fmt::format("num_attention_heads {} vs {}", a.n_heads, b.n_heads);
  if (a.n_kv_heads != b.n_kv_heads) return fmt::format("num_key_value_heads {} vs {}", a.n_kv_heads, b.n_kv_heads);
  if (a.ffn_dim != b.ffn_dim) return fmt::format("intermediate_size {} vs {}", a.ffn_dim, b.ffn_dim);
  if (a.tie_embeddings != b.tie_embeddings)
    return fmt::format("tie_word_embeddings {} vs {}", a.tie_embeddings, b.tie_embeddings);
  if (a.mask != b.mask)
    return fmt::format("attention mask {} vs {}", model::attention_mask_name(a.mask), model::attention_mask_name(b.mask));
  if (a.rope_theta != b.rope_theta) return fmt::format("rope_theta {} vs {}", a.rope_theta, b.rope_theta);
  if (a.norm_eps != b.norm_eps) return fmt::format("rms_norm_eps {} vs {}", a.norm_eps, b.norm_eps);
  return "";
}

// The metadata every checkpoint carries about the run.
std::map<std::string, std::string> state_metadata(const TrainState& state, const AdamW& opt) {
  std::map<std::string, std::string> meta = {{"lmcore_version", LMCORE_VERSION_STRING},
                                             {"step", std::to_string(state.step)},
                                             {"data_epoch", std::to_string(state.data.epoch)},
                                             {"data_cursor", std::to_string(state.data.cursor)},
                                             {"seed", std::to_string(state.seed)},
                                             {"optimizer", "adamw"},
                                             {"adamw_steps", std::to_string(opt.steps())},
                                             {"beta1", fmt::format("{}", opt.options().beta1)},
                                             {"beta2", fmt::format("{}", opt.options().beta2)},
                                             {"eps", fmt::format("{}", opt.options().eps)},
                                             {"weight_decay", fmt::format("{}", opt.options().weight_decay)}};
  for (const auto& [k, v] : state.extra) meta.emplace(k, v);
  return meta;
}

TrainState state_from_metadata(const std::map<std::string, std::string>& meta, const std::string& file) {
  TrainState s;
  s.step = parse_int(meta, "step", file);
  s.data.epoch = parse_int(meta, "data_epoch", file);
  s.data.cursor = parse_int(meta, "data_cursor", file);
  s.seed = static_cast<std::uint64_t>(parse_int(meta, "seed", file));
  (void)parse_int(meta, "adamw_steps", file);
  s.extra = meta;
  return s;
}

void copy_tokenizer(const std::string& tokenizer_file, const fs::path& dir) {
  if (tokenizer_file.empty()) return;
  fs::copy_file(tokenizer_file, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  fsync_path(dir / "tokenizer.json", false);
}

// Moves a completed temporary folder into place as final_dir (replacing an older folder of that step
// only once the new one is complete) and fsyncs the parent.
void install_folder(const fs::path& tmp, const fs::path& final_dir) {
  fsync_path(tmp, true);
  if (fs::exists(final_dir)) {
    const fs::path old = final_dir.parent_path() / (".tmp-" + final_dir.filename().string() + "-old");
    fs::remove_all(old);
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_path(final_dir.parent_path(), true);
}

void sweep_temporaries(const std::string& parent) {
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().rfind(".tmp-step_", 0) == 0) fs::remove_all(e.path());
}

}  // namespace

// ---- reading either kind ----

struct CheckpointReader::Impl {
  std::string dir;
  model::ModelConfig config;
  std::unique_ptr<model::ParameterLayout> layout;
  TrainState state;
  std::int64_t adamw_steps = 0;
  int world = 0;
  // plain: the two files' tensors by name
  io::LoadResult model_file, state_file;
  // sharded: each unit's (offset, numel, shard, local) and each rank's file, opened when first read
  struct Unit {
    std::int64_t offset, numel, shard, local;
  };
  std::vector<Unit> units;
  mutable std::vector<std::unique_ptr<io::LoadResult>> shard_files;

  const io::LoadResult& shard_file(int r) const {
    if (!shard_files[r]) {
      const std::string path = (fs::path(dir) / fmt::format("shard_{:05}_of_{:05}.safetensors", r, world)).string();
      shard_files[r] = std::make_unique<io::LoadResult>(io::load(path));
    }
    return *shard_files[r];
  }
};

CheckpointReader::CheckpointReader(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dir = dir;
  const fs::path d(dir);
  LMCORE_CHECK(is_complete(d),
               "checkpoint '{}': expected config.json with model.safetensors and train_state.safetensors, or with "
               "manifest.json (sharded)",
               dir);
  m.config = model::ModelConfig::from_file((d / "config.json").string());
  m.layout = std::make_unique<model::ParameterLayout>(m.config);
  if (is_sharded(d)) {
    const std::string mpath = (d / "manifest.json").string();
    std::ifstream in(mpath);
    std::stringstream ss;
    ss << in.rdbuf();
    const json j = json::parse(ss.str(), nullptr, false);
    LMCORE_CHECK(j.is_object() && j.value("format", "") == "lmcore-sharded" && j.contains("world_size") &&
                     j.contains("units") && j.contains("metadata"),
                 "checkpoint '{}': not an lmcore sharded manifest", mpath);
    m.world = j["world_size"].get<int>();
    LMCORE_CHECK(m.world >= 1, "checkpoint '{}': world_size {} must be >= 1", mpath, m.world);
    std::int64_t local = 0;
    for (const auto& u : j["units"]) {
      const Impl::Unit x{u.at("offset").get<std::int64_t>(), u.at("numel").get<std::int64_t>(),
                         u.at("shard").get<std::int64_t>(), local};
      LMCORE_CHECK(x.shard * m.world >= x.numel, "checkpoint '{}': unit at {} has {} elements but shards of {} x {}",
                   mpath, x.offset, x.numel, m.world, x.shard);
      local += x.shard;
      m.units.push_back(x);
    }
    LMCORE_CHECK(m.units.size() == m.layout->units().size(),
                 "checkpoint '{}': {} units in the manifest, the config's model has {}", mpath, m.units.size(),
                 m.layout->units().size());
    for (std::size_t i = 0; i < m.units.size(); ++i)
      LMCORE_CHECK(m.units[i].offset == m.layout->units()[i].offset && m.units[i].numel == m.layout->units()[i].numel,
                   "checkpoint '{}': unit {} is ({}, {}) in the manifest, ({}, {}) in the config's layout", mpath, i,
                   m.units[i].offset, m.units[i].numel, m.layout->units()[i].offset, m.layout->units()[i].numel);
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : j["metadata"].items()) meta[k] = v.get<std::string>();
    m.state = state_from_metadata(meta, mpath);
    m.adamw_steps = parse_int(meta, "adamw_steps", mpath);
    m.shard_files.resize(static_cast<std::size_t>(m.world));
  } else {
    m.model_file = io::load((d / "model.safetensors").string());
    const std::string spath = (d / "train_state.safetensors").string();
    m.state_file = io::load(spath);
    m.state = state_from_metadata(m.state_file.metadata, spath);
    m.adamw_steps = parse_int(m.state_file.metadata, "adamw_steps", spath);
    // Every tensor must be there with its shape before anything is read.
    for (const auto& p : m.layout->params()) {
      const io::Entry* e = m.model_file.tensors.find(p.name);
      LMCORE_CHECK(e && e->tensor.shape() == p.shape, "checkpoint '{}': model tensor '{}' is {}, expected {}", dir,
                   p.name, e ? shape_str(e->tensor.shape()) : std::string("missing"), shape_str(p.shape));
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
        const io::Entry* s = m.state_file.tensors.find(kind + p.name);
        LMCORE_CHECK(s && s->tensor.shape() == p.shape && s->tensor.dtype() == DType::f32,
                     "checkpoint '{}': tensor '{}{}' is {}, expected f32 {}", spath, kind, p.name,
                     s ? s->tensor.describe() : std::string("missing"), shape_str(p.shape));
      }
    }
  }
}

CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
const model::ModelConfig& CheckpointReader::config() const { return impl_->config; }
const TrainState& CheckpointReader::state() const { return impl_->state; }
std::int64_t CheckpointReader::adamw_steps() const { return impl_->adamw_steps; }
int CheckpointReader::world_size() const { return impl_->world; }

void CheckpointReader::read(Kind kind, std::int64_t begin, std::int64_t count, float* out) const {
  const Impl& m = *impl_;
  LMCORE_CHECK(begin >= 0 && count >= 0 && begin + count <= m.layout->size(),
               "checkpoint '{}': elements [{}, {}) are outside the {} parameters", m.dir, begin, begin + count,
               m.layout->size());
  std::fill(out, out + count, 0.0f);
  const std::int64_t end = begin + count;
  if (m.world == 0) {
    const char* prefix = kind == Kind::params ? "" : (kind == Kind::exp_avg ? "exp_avg." : "exp_avg_sq.");
    const io::LoadResult& file = kind == Kind::params ? m.model_file : m.state_file;
    for (const auto& p : m.layout->params()) {
      const std::int64_t a = std::max(begin, p.offset), b = std::min(end, p.offset + p.numel);
      if (a >= b) continue;
      const Tensor& t = file.tensors.at(std::string(prefix) + p.name);
      Tensor::from_blob(out + (a - begin), {b - a}, DType::f32, nullptr).copy_(t.reshape({-1}).narrow(0, a - p.offset, b - a));
    }
    return;
  }
  const char* name = kind == Kind::params ? "params" : (kind == Kind::exp_avg ? "exp_avg" : "exp_avg_sq");
  for (const Impl::Unit& u : m.units) {
    const std::int64_t a = std::max(begin, u.offset), b = std::min(end, u.offset + u.numel);
    if (a >= b) continue;
    // [a, b) within the unit: pieces of the old shards.
    for (std::int64_t x = a; x < b;) {
      const std::int64_t within = x - u.offset;
      const int r = static_cast<int>(within / u.shard);
      const std::int64_t upto = std::min(b, u.offset + (static_cast<std::int64_t>(r) + 1) * u.shard);
      const io::LoadResult& f = m.shard_file(r);
      const Tensor& t = f.tensors.at(name);
      LMCORE_CHECK(t.dtype() == DType::f32 && t.dim() == 1,
                   "checkpoint '{}': shard {}'s '{}' is {}, expected a flat f32 tensor", m.dir, r, name, t.describe());
      const std::int64_t src = u.local + (within - static_cast<std::int64_t>(r) * u.shard);
      LMCORE_CHECK(src + (upto - x) <= t.numel(), "checkpoint '{}': shard {}'s '{}' has {} elements, needs {}", m.dir,
                   r, name, t.numel(), src + (upto - x));
      std::copy_n(t.data<float>() + src, upto - x, out + (x - begin));
      x = upto;
    }
  }
}

// ---- writing ----

std::string save_checkpoint(const std::string& parent, const model::Llama& m, const AdamW& opt,
                            const TrainState& state, const std::string& tokenizer_file) {
  LMCORE_CHECK(opt.begin() == 0 && opt.size() == m.layout().size(),
               "save_checkpoint: the optimizer covers {} of {} parameters; a sharded run writes a sharded checkpoint",
               opt.size(), m.layout().size());
  base::create_directories(parent, "save_checkpoint");
  // One writer per run folder: temporary folders left by a crash are removed before writing.
  sweep_temporaries(parent);
  const fs::path final_dir = fs::path(parent) / step_name(state.step);
  const fs::path tmp = fs::path(parent) / fmt::format(".tmp-{}-{}", step_name(state.step), ::getpid());
  fs::create_directory(tmp);
  try {
    const auto meta = state_metadata(state, opt);
    model::save_model_folder(tmp.string(), m.config(), m.layout(), m.params(),
                             {{"lmcore_version", LMCORE_VERSION_STRING}, {"step", std::to_string(state.step)}});
    io::NamedTensors tensors;
    for (const model::ParamSpec& p : m.layout().params()) {
      tensors.emplace_back("exp_avg." + p.name, m.layout().view(opt.exp_avg(), p));
      tensors.emplace_back("exp_avg_sq." + p.name, m.layout().view(opt.exp_avg_sq(), p));
    }
    io::save_safetensors((tmp / "train_state.safetensors").string(), tensors, meta);
    copy_tokenizer(tokenizer_file, tmp);
    install_folder(tmp, final_dir);
  } catch (const fs::filesystem_error& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fail("checkpoint {}: {}", final_dir.string(), e.what());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_dir.string();
}

std::string save_sharded_checkpoint(const std::string& parent, fsdp::ShardedLlama& m, const AdamW& opt,
                                    const TrainState& state, const std::string& tokenizer_file) {
  dist::ProcessGroup& pg = m.group();
  const int rank = pg.rank(), world = pg.world_size();
  const fs::path final_dir = fs::path(parent) / step_name(state.step);
  const fs::path tmp = fs::path(parent) / fmt::format(".tmp-{}-sharded", step_name(state.step));
  // Every rank reports whether its part worked, so that all of them fail together (no rank renames a
  // folder another could not complete, and none waits forever for one that gave up).
  auto agree = [&](bool ok, const std::string& what) {
    Tensor t = Tensor::full({1}, ok ? 1.0 : 0.0, DType::i32);
    pg.all_reduce(t, {.op = dist::ReduceOp::min});
    if (t.data<std::int32_t>()[0] == 0) fail("sharded checkpoint {}: {} failed on some rank", final_dir.string(), what);
  };
  std::string error;
  if (rank == 0) {
    try {
      base::create_directories(parent, "save_checkpoint");
      sweep_temporaries(parent);
      fs::create_directory(tmp);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error.empty(), rank == 0 && !error.empty() ? error : "creating the folder");
  try {
    io::NamedTensors tensors = {{"params", m.params()}, {"exp_avg", opt.exp_avg()}, {"exp_avg_sq", opt.exp_avg_sq()}};
    io::save_safetensors((tmp / fmt::format("shard_{:05}_of_{:05}.safetensors", rank, world)).string(), tensors,
                         {{"rank", std::to_string(rank)}, {"world_size", std::to_string(world)},
                          {"step", std::to_string(state.step)}, {"lmcore_version", LMCORE_VERSION_STRING}});
  } catch (const std::exception& e) {
    error = e.what();
  }
  fault_point("checkpoint.shard");
  if (!error.empty()) std::fprintf(stderr, "rank %d: writing its shard failed: %s\n", rank, error.c_str());
  agree(error.empty(), "writing a shard");
  if (rank == 0) {
    try {
      json j;
      j["format"] = "lmcore-sharded";
      j["version"] = 1;
      j["world_size"] = world;
      j["units"] = json::array();
      for (const fsdp::UnitShard& u : m.units())
        j["units"].push_back({{"offset", u.offset}, {"numel", u.numel}, {"padded", u.padded}, {"shard", u.shard}});
      j["metadata"] = state_metadata(state, opt);
      const std::string text = j.dump(2) + "\n";
      base::write_file_atomically((tmp / "manifest.json").string(), text, {.what = "checkpoint"});
      base::write_file_atomically((tmp / "config.json").string(), m.config().to_json(), {.what = "checkpoint"});
      copy_tokenizer(tokenizer_file, tmp);
      install_folder(tmp, final_dir);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  agree(error.empty(), rank == 0 && !error.empty() ? error : "installing the folder");
  return final_dir.string();
}

// ---- loading ----

namespace {
void check_config(const CheckpointReader& r, const model::ModelConfig& c, const std::string& dir) {
  const std::string diff = config_difference(r.config(), c);
  LMCORE_CHECK(diff.empty(), "checkpoint '{}': its config differs from this run's: {} (checkpoint vs run)", dir, diff);
}
}  // namespace

TrainState load_checkpoint(const std::string& dir, model::Llama& m, AdamW& opt) {
  const CheckpointReader r(dir);
  check_config(r, m.config(), dir);
  LMCORE_CHECK(opt.begin() == 0 && opt.size() == m.layout().size(),
               "load_checkpoint: the optimizer covers {} of {} parameters", opt.size(), m.layout().size());
  const std::int64_t n = m.layout().size();
  r.read(CheckpointReader::Kind::params, 0, n, m.params().data<float>());
  r.read(CheckpointReader::Kind::exp_avg, 0, n, opt.exp_avg().data<float>());
  r.read(CheckpointReader::Kind::exp_avg_sq, 0, n, opt.exp_avg_sq().data<float>());
  m.params_updated();
  opt.set_steps(r.adamw_steps());
  return r.state();
}

TrainState load_checkpoint(const std::string& dir, fsdp::ShardedLlama& m, AdamW& opt) {
  const CheckpointReader r(dir);
  check_config(r, m.config(), dir);
  const auto pieces = m.pieces();
  LMCORE_CHECK(opt.size() == m.params().numel(), "load_checkpoint: the optimizer covers {} elements, the shard {}",
               opt.size(), m.params().numel());
  std::int64_t local = 0;
  for (const model::ShardPiece& p : pieces) {
    r.read(CheckpointReader::Kind::params, p.global_begin, p.real, m.params().data<float>() + local);
    r.read(CheckpointReader::Kind::exp_avg, p.global_begin, p.real, opt.exp_avg().data<float>() + local);
    r.read(CheckpointReader::Kind::exp_avg_sq, p.global_begin, p.real, opt.exp_avg_sq().data<float>() + local);
    for (Tensor* t : {&m.params(), &opt.exp_avg(), &opt.exp_avg_sq()})
      std::fill(t->data<float>() + local + p.real, t->data<float>() + local + p.length, 0.0f);
    local += p.length;
  }
  m.params_updated();
  opt.set_steps(r.adamw_steps());
  return r.state();
}

void consolidate_checkpoint(const std::string& dir, const std::string& out_dir) {
  const CheckpointReader r(dir);
  const model::ParameterLayout layout(r.config());
  Tensor flat = Tensor::empty({layout.size()}, DType::f32);
  r.read(CheckpointReader::Kind::params, 0, layout.size(), flat.data<float>());
  base::create_directories(out_dir, "consolidate");
  model::save_model_folder(out_dir, r.config(), layout, flat,
                           {{"lmcore_version", LMCORE_VERSION_STRING}, {"step", std::to_string(r.state().step)},
                            {"consolidated_from", dir}});
}

// ---- run folders ----

std::vector<std::string> list_checkpoints(const std::string& parent) {
  std::vector<std::string> out;
  if (!fs::is_directory(parent)) return out;
  for (const auto& e : fs::directory_iterator(parent)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && is_step_name(name) && is_complete(e.path())) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());  // fixed-width step numbers sort by step
  return out;
}

std::string resolve_checkpoint(const std::string& path) {
  LMCORE_CHECK(fs::exists(path), "checkpoint '{}' does not exist", path);
  if (is_complete(path)) return path;
  for (const std::string& parent : {path, (fs::path(path) / "checkpoints").string()}) {
    const auto all = list_checkpoints(parent);
    if (!all.empty()) return all.back();
  }
  fail("'{}' is neither a checkpoint folder nor a run folder with checkpoints (checkpoints/step_XXXXXXXX)", path);
}

std::string run_folder_of(const std::string& checkpoint_dir) {
  fs::path p = fs::path(checkpoint_dir);
  if (!p.has_filename()) p = p.parent_path();  // a trailing '/'
  const fs::path parent = p.parent_path();
  if (parent.filename() != "checkpoints" || !is_step_name(p.filename().string())) return "";
  const std::string run = parent.parent_path().string();
  return run.empty() ? "." : run;
}

void prune_checkpoints(const std::string& parent, int keep) {
  LMCORE_CHECK(keep >= 1, "prune_checkpoints: keep must be >= 1, found {}", keep);
  const auto all = list_checkpoints(parent);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace lmcore::train
