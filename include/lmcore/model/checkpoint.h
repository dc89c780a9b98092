// lmcore/model/checkpoint.h — a model as a Hugging Face Llama folder: config.json + model.safetensors.
//
// model.safetensors holds one f32 tensor per ParameterLayout entry under its Hugging Face name (no
// lm_head.weight when the embeddings are tied, as transformers saves it); a folder written by
// transformers' save_pretrained(safe_serialization=True) for a LlamaForCausalLM in f32/bf16/f16 loads
// too. Files are written atomically (temporary file, fsync, rename).
//
//   save_model_folder("run/ckpt", config, layout, model.params(), {{"step", "100"}});
//   LoadedModel m = load_model_folder("run/ckpt");   // m.config, m.params (flat f32)
#pragma once

#include <map>
#include <string>

#include "lmcore/core/tensor.h"
#include "lmcore/model/config.h"
#include "lmcore/model/parameters.h"

namespace lmcore::model {

// Writes dir/config.json and dir/model.safetensors, making dir when it is missing.
void save_model_folder(const std::string& dir, const ModelConfig& config, const ParameterLayout& layout,
                       const Tensor& flat_params, const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file's tensors into a flat f32 buffer laid out by `layout`. Every parameter must be
// present with its exact shape (any float dtype, widened); a tied config accepts an lm_head.weight equal to
// the embedding. Missing, extra or misshapen tensors are errors naming the file, the tensor, the
// expected and the found shape.
void load_params(const std::string& safetensors_path, const ParameterLayout& layout, Tensor& flat_params);

struct LoadedModel {
  ModelConfig config;
  Tensor params;  // flat f32, ParameterLayout(config)
};
LoadedModel load_model_folder(const std::string& dir);

}  // namespace lmcore::model
