#include "lmcore/model/checkpoint.h"

#include <filesystem>
#include <set>

#include "lmcore/base/atomic_file.h"
#include "lmcore/core/error.h"
#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/model/config.h"

namespace lmcore::model {

void save_model_folder(const std::string& dir, const ModelConfig& config, const ParameterLayout& layout,
                       const Tensor& flat_params, const std::map<std::string, std::string>& metadata) {
  // Made when missing, as transformers' save_pretrained makes its folder.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LMCORE_CHECK(!ec, "save_model_folder: cannot create the folder '{}': {}", dir, ec.message());
  io::NamedTensors tensors;
  for (const ParamSpec& p : layout.params()) tensors.emplace_back(p.name, layout.view(flat_params, p));
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // what transformers writes and checks for
  io::save_safetensors(dir + "/model.safetensors", tensors, meta);
  base::write_file_atomically(dir + "/config.json", config.to_json(), {.what = "save_model_folder"});
}

void load_params(const std::string& path, const ParameterLayout& layout, Tensor& flat) {
  const io::LoadResult r = io::load(path);
  LMCORE_CHECK(r.format == io::Format::safetensors, "model weights '{}': expected safetensors, found {}", path,
               io::format_name(r.format));
  std::set<std::string> used;
  for (const ParamSpec& p : layout.params()) {
    const io::Entry* e = r.tensors.find(p.name);
    LMCORE_CHECK(e != nullptr, "model weights '{}': tensor '{}' is missing (expected shape {})", path, p.name,
                 shape_str(p.shape));
    LMCORE_CHECK(e->tensor.shape() == p.shape, "model weights '{}': tensor '{}' has shape {}, expected {}", path, p.name,
                 shape_str(e->tensor.shape()), shape_str(p.shape));
    LMCORE_CHECK(is_floating(e->tensor.dtype()) && !is_storage_only(e->tensor.dtype()),
                 "model weights '{}': tensor '{}' has dtype {}, expected f32, bf16 or f16", path, p.name,
                 e->tensor.dtype());
    layout.view(flat, p).copy_(e->tensor);
    used.insert(p.name);
  }
  for (const io::Entry& e : r.tensors) {
    if (used.count(e.name)) continue;
    if (e.name == "lm_head.weight" && layout.find("lm_head.weight") == nullptr) {
      // Tied: transformers may still write the head; it must be the embedding.
      const Tensor emb = layout.view(flat, layout.at("model.embed_tokens.weight"));
      LMCORE_CHECK(e.tensor.shape() == emb.shape() && e.tensor.to(DType::f32).to_vector<float>() == emb.to_vector<float>(),
                   "model weights '{}': the config ties the embeddings but lm_head.weight differs from "
                   "model.embed_tokens.weight",
                   path);
      continue;
    }
    if (e.name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older transformers saved
    fail("model weights '{}': unexpected tensor '{}' {} (not part of this model's config)", path, e.name,
         shape_str(e.tensor.shape()));
  }
}

LoadedModel load_model_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  LMCORE_CHECK(fs::is_directory(dir), "model folder '{}' does not exist or is not a folder", dir);
  LoadedModel m;
  m.config = ModelConfig::from_file((fs::path(dir) / "config.json").string());
  const ParameterLayout layout(m.config);
  m.params = Tensor::zeros({layout.size()}, DType::f32);
  load_params((fs::path(dir) / "model.safetensors").string(), layout, m.params);
  return m;
}

}  // namespace lmcore::model
