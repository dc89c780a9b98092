// Python bindings of the model and train parts: the Llama model with its forward/backward, AdamW and
// gradient clipping, and the training loop.
//
//   m = lmcore.Llama(open("config.json").read(), batch=2, seq_len=64)
//   m.init_weights(seed=1)                      # or m.load("model.safetensors")
//   m.zero_grad()
//   loss, z = m.forward_backward(tokens, targets)   # int32 (B, T) arrays or tensors
//   g = m.grad("model.layers.0.mlp.down_proj.weight")   # an lmcore.Tensor view of the gradient
//   opt = lmcore.AdamW(m, weight_decay=0.1); opt.step(lr=1e-3); m.params_updated()
#include <pybind11/stl.h>

#include "lmcore/core/parallel.h"
#include "lmcore/model/checkpoint.h"
#include "lmcore/model/llama.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/trainer.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

// An int32 (B, T) token tensor from any accepted object, checked against the model's batch shape.
Tensor tokens_of(const py::object& obj, const model::Llama& m, const char* name) {
  Tensor t = to_tensor(obj, name);
  if (t.dtype() == DType::i64) t = t.to(DType::i32);
  LMCORE_CHECK(t.dtype() == DType::i32, "Llama: {} must be int32 or int64 token ids, found {}", name, t.dtype());
  LMCORE_CHECK(t.numel() == m.batch() * m.seq_len(),
               "Llama: {} must hold batch x seq_len = {} x {} tokens, found shape {}", name, m.batch(), m.seq_len(),
               shape_str(t.shape()));
  return t.contiguous();
}

struct PyAdamW {
  model::Llama* model;
  train::AdamW opt;
};

}  // namespace

void bind_model(py::module_& m) {
  py::class_<model::Llama>(m, "Llama", "A Llama-style decoder-only transformer with hand-written backward.")
      .def(py::init([](const std::string& config_json, std::int64_t batch, std::int64_t seq_len, const std::string& dtype,
                       bool recompute) {
             return new model::Llama(model::ModelConfig::from_json(config_json, "config"),
                                     {batch, seq_len, dtype_from_name(dtype), recompute});
           }),
           py::arg("config_json"), py::arg("batch") = 1, py::arg("seq_len") = 0, py::arg("dtype") = "f32",
           py::arg("recompute") = false)
      .def("init_weights", &model::Llama::init_weights, py::arg("seed"))
      .def("zero_grad", &model::Llama::zero_grad)
      .def("params_updated", &model::Llama::params_updated)
      .def("load", [](model::Llama& self, const std::string& path) {
             model::load_params(path, self.layout(), self.params());
             self.params_updated();
           }, py::arg("path"), "Reads parameters from a model.safetensors with Hugging Face names.")
      .def("save", [](const model::Llama& self, const std::string& dir) {
             model::save_model_folder(dir, self.config(), self.layout(), self.params());
           }, py::arg("dir"), "Writes dir/config.json and dir/model.safetensors.")
      .def("param_names", [](const model::Llama& self) {
             std::vector<std::string> names;
             for (const auto& p : self.layout().params()) names.push_back(p.name);
             return names;
           })
      .def("param", &model::Llama::param, py::arg("name"), "A view of the parameter (writes go to the model).")
      .def("grad", &model::Llama::grad, py::arg("name"), "A view of the parameter's gradient.")
      .def_property_readonly("config_json", [](const model::Llama& self) { return self.config().to_json(); })
      .def_property_readonly("num_parameters", [](const model::Llama& self) { return self.config().num_parameters(); })
      .def_property_readonly("activation_bytes", &model::Llama::activation_bytes)
      .def_property_readonly("flops_per_step", &model::Llama::flops_per_step)
      .def("forward_backward",
           [](model::Llama& self, const py::object& tokens, const py::object& targets, float grad_scale) {
             const Tensor x = tokens_of(tokens, self, "tokens"), y = tokens_of(targets, self, "targets");
             py::gil_scoped_release release;
             const model::StepLoss l = self.forward_backward(x.data<std::int32_t>(), y.data<std::int32_t>(), grad_scale);
             return std::make_pair(l.loss, l.z_loss);
           },
           py::arg("tokens"), py::arg("targets"), py::arg("grad_scale") = 1.0f,
           "Adds grad_scale * d loss / d params into the gradients; returns (loss, z_loss).")
      .def("forward_loss",
           [](model::Llama& self, const py::object& tokens, const py::object& targets) {
             const Tensor x = tokens_of(tokens, self, "tokens"), y = tokens_of(targets, self, "targets");
             py::gil_scoped_release release;
             const model::StepLoss l = self.forward_loss(x.data<std::int32_t>(), y.data<std::int32_t>());
             return std::make_pair(l.loss, l.z_loss);
           },
           py::arg("tokens"), py::arg("targets"))
      .def("logits",
           [](model::Llama& self, const py::object& tokens) {
             const Tensor x = tokens_of(tokens, self, "tokens");
             py::gil_scoped_release release;
             return self.logits(x.data<std::int32_t>());
           },
           py::arg("tokens"), "(batch * seq_len, vocab) f32 logits, after the softcap.");

  py::class_<PyAdamW>(m, "AdamW", "AdamW over a Llama's flat parameters (torch.optim.AdamW's update).")
      .def(py::init([](model::Llama& model, double beta1, double beta2, double eps, double weight_decay) {
             return new PyAdamW{&model, train::AdamW(model.layout(), {beta1, beta2, eps, weight_decay})};
           }),
           py::arg("model"), py::arg("beta1") = 0.9, py::arg("beta2") = 0.95, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.1, py::keep_alive<1, 2>())
      .def("step",
           [](PyAdamW& self, double lr) {
             self.opt.step(self.model->params().data<float>(), self.model->grads().data<float>(), lr);
             self.model->params_updated();
           },
           py::arg("lr"))
      .def_property_readonly("steps", [](const PyAdamW& self) { return self.opt.steps(); });

  m.def("clip_grad_norm",
        [](model::Llama& model, double max_norm) {
          float* g = model.grads().data<float>();
          const double norm = std::sqrt(train::grad_norm_squared(g, model.layout().size()));
          train::clip_grad_norm(g, model.layout().size(), norm, max_norm);
          return norm;
        },
        py::arg("model"), py::arg("max_norm"),
        "Clips the model's gradients to a global L2 norm (torch's rule); returns the norm before clipping.");
}

}  // namespace lmcore::python
