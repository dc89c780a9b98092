#include "lmcore/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/model/checkpoint.h"
#include "lmcore/version.h"

namespace lmcore::train {

namespace fs = std::filesystem;

namespace {

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string step_name(std::int64_t step) { return fmt::format("step_{:08}", step); }

bool is_step_name(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_complete(const fs::path& dir) {
  return fs::is_regular_file(dir / "model.safetensors") && fs::is_regular_file(dir / "config.json") &&
         fs::is_regular_file(dir / "train_state.safetensors");
}

std::int64_t parse_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& file) {
  const auto it = meta.find(key);
  LMCORE_CHECK(it != meta.end(), "checkpoint '{}': metadata key '{}' is missing", file, key);
  try {
    std::size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    LMCORE_CHECK(used == it->second.size(), "bad");
    return v;
  } catch (const std::exception&) {
    fail("checkpoint '{}': metadata '{}' = '{}' is not an integer", file, key, it->second);
  }
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

}  // namespace

std::string save_checkpoint(const std::string& parent, const model::Llama& m, const AdamW& opt,
                            const TrainState& state, const std::string& tokenizer_file) {
  LMCORE_CHECK(opt.begin() == 0 && opt.size() == m.layout().size(),
               "save_checkpoint: the optimizer covers [{}, {}) of {} parameters; a sharded optimizer writes a "
               "sharded checkpoint",
               opt.begin(), opt.begin() + opt.size(), m.layout().size());
  fs::create_directories(parent);
  // One writer per run folder: temporary folders left by a crash are removed before writing.
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().rfind(".tmp-step_", 0) == 0) fs::remove_all(e.path());
  const fs::path final_dir = fs::path(parent) / step_name(state.step);
  const fs::path tmp = fs::path(parent) / fmt::format(".tmp-{}-{}", step_name(state.step), ::getpid());
  fs::create_directory(tmp);
  try {
    std::map<std::string, std::string> meta = {{"lmcore_version", LMCORE_VERSION_STRING},
                                               {"step", std::to_string(state.step)}};
    model::save_model_folder(tmp.string(), m.config(), m.layout(), m.params(), meta);
    meta["data_epoch"] = std::to_string(state.data.epoch);
    meta["data_cursor"] = std::to_string(state.data.cursor);
    meta["seed"] = std::to_string(state.seed);
    meta["optimizer"] = "adamw";
    meta["adamw_steps"] = std::to_string(opt.steps());
    meta["beta1"] = fmt::format("{}", opt.options().beta1);
    meta["beta2"] = fmt::format("{}", opt.options().beta2);
    meta["eps"] = fmt::format("{}", opt.options().eps);
    meta["weight_decay"] = fmt::format("{}", opt.options().weight_decay);
    for (const auto& [k, v] : state.extra) meta.emplace(k, v);
    io::NamedTensors tensors;
    const Tensor& m1 = opt.exp_avg();
    const Tensor& m2 = opt.exp_avg_sq();
    for (const model::ParamSpec& p : m.layout().params()) {
      tensors.emplace_back("exp_avg." + p.name, m.layout().view(m1, p));
      tensors.emplace_back("exp_avg_sq." + p.name, m.layout().view(m2, p));
    }
    io::save_safetensors((tmp / "train_state.safetensors").string(), tensors, meta);
    if (!tokenizer_file.empty()) {
      fs::copy_file(tokenizer_file, tmp / "tokenizer.json", fs::copy_options::overwrite_existing);
      const int fd = ::open((tmp / "tokenizer.json").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        (void)::fsync(fd);
        ::close(fd);
      }
    }
    fsync_dir(tmp);
    if (fs::exists(final_dir)) {
      const fs::path old = fs::path(parent) / fmt::format(".tmp-{}-old-{}", step_name(state.step), ::getpid());
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_dir(parent);
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

TrainState load_checkpoint(const std::string& dir, model::Llama& m, AdamW& opt) {
  const fs::path d(dir);
  LMCORE_CHECK(is_complete(d), "checkpoint '{}': expected model.safetensors, config.json and train_state.safetensors",
               dir);
  const model::ModelConfig saved = model::ModelConfig::from_file((d / "config.json").string());
  const std::string diff = config_difference(saved, m.config());
  LMCORE_CHECK(diff.empty(), "checkpoint '{}': its config differs from this run's: {} (checkpoint vs run)", dir, diff);
  model::load_params((d / "model.safetensors").string(), m.layout(), m.params());
  m.params_updated();
  const std::string state_path = (d / "train_state.safetensors").string();
  const io::LoadResult r = io::load(state_path);
  for (const model::ParamSpec& p : m.layout().params()) {
    for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
      const io::Entry* e = r.tensors.find(std::string(kind) + p.name);
      LMCORE_CHECK(e != nullptr, "checkpoint '{}': tensor '{}{}' is missing", state_path, kind, p.name);
      LMCORE_CHECK(e->tensor.shape() == p.shape && e->tensor.dtype() == DType::f32,
                   "checkpoint '{}': tensor '{}{}' is {}, expected f32 {}", state_path, kind, p.name,
                   e->tensor.describe(), shape_str(p.shape));
      Tensor& dst = std::string(kind) == "exp_avg." ? opt.exp_avg() : opt.exp_avg_sq();
      m.layout().view(dst, p).copy_(e->tensor);
    }
  }
  TrainState s;
  s.step = parse_int(r.metadata, "step", state_path);
  s.data.epoch = parse_int(r.metadata, "data_epoch", state_path);
  s.data.cursor = parse_int(r.metadata, "data_cursor", state_path);
  s.seed = static_cast<std::uint64_t>(parse_int(r.metadata, "seed", state_path));
  opt.set_steps(parse_int(r.metadata, "adamw_steps", state_path));
  for (const auto& [k, v] : r.metadata) s.extra[k] = v;
  return s;
}

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

void prune_checkpoints(const std::string& parent, int keep) {
  LMCORE_CHECK(keep >= 1, "prune_checkpoints: keep must be >= 1, found {}", keep);
  const auto all = list_checkpoints(parent);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace lmcore::train
