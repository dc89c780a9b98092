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
#include <pybind11/stl/filesystem.h>

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

// An f32 contiguous copy (or the tensor itself) of a float tensor of the given rank.
Tensor f32_input(const py::object& obj, const char* name, std::int64_t rank) {
  const Tensor t = to_tensor(obj, name);
  LMCORE_CHECK(is_floating(t.dtype()) && !is_storage_only(t.dtype()), "{}: expected a float tensor, found {}", name,
               t.dtype());
  LMCORE_CHECK(t.dim() == rank, "{}: expected {} dims, found shape {}", name, rank, shape_str(t.shape()));
  return t.to(DType::f32).contiguous();
}

struct PyAdamW {
  model::Llama* model;
  train::AdamW opt;
};

}  // namespace

void bind_model(py::module_& m) {
  py::class_<model::Llama>(m, "Llama", "A Llama-style decoder-only transformer with hand-written backward.")
      .def(py::init([](const std::string& config_json, std::int64_t batch, std::int64_t seq_len, const std::string& dtype,
                       bool recompute, std::optional<bool> keep_gate_up) {
             model::ModelOptions o{batch, seq_len, dtype_from_name(dtype), recompute};
             o.keep_gate_up = keep_gate_up;
             return new model::Llama(model::ModelConfig::from_json(config_json, "config"), o);
           }),
           py::arg("config_json"), py::arg("batch") = 1, py::arg("seq_len") = 0, py::arg("dtype") = "f32",
           py::arg("recompute") = false, py::arg("keep_gate_up") = py::none(),
           "keep_gate_up: keep each block's gate|up product for the backward (True) or recompute it there "
           "(False, same bits, less memory); None follows the size rule (kept below 2^26 parameters).")
      .def_property_readonly("keeps_gate_up", &model::Llama::keeps_gate_up)
      .def("init_weights", &model::Llama::init_weights, py::arg("seed"))
      .def("zero_grad", &model::Llama::zero_grad)
      .def("params_updated", &model::Llama::params_updated)
      .def("load", [](model::Llama& self, const std::filesystem::path& path) {
             model::load_params(path.string(), self.layout(), self.params());
             self.params_updated();
           }, py::arg("path"), "Reads parameters from a model.safetensors with Hugging Face names.")
      .def("save", [](const model::Llama& self, const std::filesystem::path& dir) {
             model::save_model_folder(dir.string(), self.config(), self.layout(), self.params());
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

  // ---- the layers one by one (lmcore/model/layers.h), for tests against torch autograd ----
  py::module_ layers = m.def_submodule("layers", "The model's forward/backward layer pairs on f32 (inputs widened).");
  layers.def("rmsnorm_forward",
             [](const py::object& x, const py::object& w, float eps) {
               const Tensor tx = f32_input(x, "x", 2), tw = f32_input(w, "weight", 1);
               const std::int64_t N = tx.size(0), C = tx.size(1);
               LMCORE_CHECK(tw.size(0) == C, "rmsnorm: weight has {} elements, expected {}", tw.size(0), C);
               Tensor out = Tensor::empty({N, C}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
               model::rmsnorm_forward(out.data<float>(), rstd.data<float>(), tx.data<float>(), tw.data<float>(), N, C, eps);
               return std::make_pair(out, rstd);
             },
             py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-5f, "(N, C) -> (out (N, C), rstd (N))");
  layers.def("rmsnorm_backward",
             [](const py::object& dout, const py::object& x, const py::object& w, const py::object& rstd) {
               const Tensor td = f32_input(dout, "dout", 2), tx = f32_input(x, "x", 2), tw = f32_input(w, "weight", 1);
               const Tensor tr = f32_input(rstd, "rstd", 1);
               const std::int64_t N = tx.size(0), C = tx.size(1);
               Tensor dx = Tensor::zeros({N, C}, DType::f32), dw = Tensor::zeros({C}, DType::f32);
               model::rmsnorm_backward(dx.data<float>(), dw.data<float>(), td.data<float>(), tx.data<float>(),
                                       tw.data<float>(), tr.data<float>(), N, C);
               return std::make_pair(dx, dw);
             },
             py::arg("dout"), py::arg("x"), py::arg("weight"), py::arg("rstd"), "-> (dx, dweight)");
  auto rope = [](const py::object& x, std::int64_t heads, double theta, bool backward) {
    const Tensor tx = f32_input(x, "x", 4);  // (B, T, heads, hd)
    const std::int64_t B = tx.size(0), T = tx.size(1), H = tx.size(2), hd = tx.size(3);
    LMCORE_CHECK(heads >= 0 && heads <= H, "rope: heads must be in [0, {}], found {}", H, heads);
    Tensor out = tx.clone();
    const model::RopeTable table = model::RopeTable::make(T, hd, theta);
    (backward ? model::rope_backward : model::rope_forward)(out.data<float>(), B * T, T, H * hd, heads, table);
    return out;
  };
  layers.def("rope_forward", [=](const py::object& x, std::int64_t heads, double theta) { return rope(x, heads, theta, false); },
             py::arg("x"), py::arg("heads"), py::arg("theta") = 10000.0,
             "x (B, T, H, hd): the first `heads` heads rotated (Hugging Face's rotate_half layout)");
  layers.def("rope_backward", [=](const py::object& x, std::int64_t heads, double theta) { return rope(x, heads, theta, true); },
             py::arg("dx"), py::arg("heads"), py::arg("theta") = 10000.0);
  layers.def("swiglu_forward",
             [](const py::object& gu) {
               const Tensor t = f32_input(gu, "gu", 2);
               const std::int64_t N = t.size(0), F = t.size(1) / 2;
               LMCORE_CHECK(t.size(1) % 2 == 0, "swiglu: gu needs an even number of columns (gate | up), found {}", t.size(1));
               Tensor out = Tensor::empty({N, F}, DType::f32);
               model::swiglu_forward(out.data<float>(), t.data<float>(), N, F);
               return out;
             },
             py::arg("gu"), "(N, 2F) gate | up -> (N, F)");
  layers.def("swiglu_backward",
             [](const py::object& dout, const py::object& gu) {
               const Tensor d = f32_input(dout, "dout", 2), t = f32_input(gu, "gu", 2);
               const std::int64_t N = t.size(0), F = t.size(1) / 2;
               LMCORE_CHECK(d.size(0) == N && d.size(1) == F, "swiglu_backward: dout must be ({}, {}), found {}", N, F,
                            shape_str(d.shape()));
               Tensor dgu = Tensor::empty({N, 2 * F}, DType::f32);
               model::swiglu_backward(dgu.data<float>(), d.data<float>(), t.data<float>(), N, F);
               return dgu;
             },
             py::arg("dout"), py::arg("gu"));

  m.def("clip_grad_norm",
        [](model::Llama& model, double max_norm) {
          // NaN and negative values used to mean "no clipping" without a word (torch would scale the
          // gradients by NaN or flip their sign); 0 and inf stay "no clipping", as the trainer's
          // --grad-clip 0.
          LMCORE_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be a number >= 0 (0 or inf: no clipping), found {}",
                       max_norm);
          float* g = model.grads().data<float>();
          const double norm = std::sqrt(train::grad_norm_squared(g, model.layout().size()));
          train::clip_grad_norm(g, model.layout().size(), norm, max_norm);
          return norm;
        },
        py::arg("model"), py::arg("max_norm"),
        "Clips the model's gradients to a global L2 norm (torch's rule; max_norm 0 or inf: no clipping); returns the "
        "norm before clipping.");
}

}  // namespace lmcore::python
