// Python bindings of the loss part: cross_entropy, the fused and unfused linear cross-entropy, and
// LinearCrossEntropyLoss. Options are keyword arguments with the names of LossOptions' fields:
//
//   loss, z, lse = lmcore.linear_cross_entropy(h, w, t, label_smoothing=0.1, reduction="sum")
//   loss, z, lse, d_h = lmcore.linear_cross_entropy_with_grad(h, w, t, grad_loss=1.0, d_weight=dw)
//
// Tensors are taken zero-copy (torch tensors through DLPack), so d_weight/d_bias given as torch
// tensors receive the gradient in place.
#include <pybind11/stl.h>

#include <string>

#include "lmcore/loss/cross_entropy.h"
#include "lmcore/loss/linear_cross_entropy.h"
#include "lmcore/loss/linear_cross_entropy_loss.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

Tensor optional_tensor(const py::handle& obj, const char* name) {
  if (obj.is_none()) return Tensor();
  return to_tensor(py::reinterpret_borrow<py::object>(obj), name);
}

// Reads LossOptions from keyword arguments; an unknown keyword is an error naming it.
LossOptions options_from(const py::kwargs& kw) {
  LossOptions o;
  for (const auto& item : kw) {
    const std::string key = py::cast<std::string>(item.first);
    const py::handle v = item.second;
    if (key == "bias") o.bias = optional_tensor(v, "bias");
    else if (key == "class_weight" || key == "weight_class") o.class_weight = optional_tensor(v, "class_weight");
    else if (key == "ignore_index") o.ignore_index = py::cast<std::int64_t>(v);
    else if (key == "reduction") o.reduction = reduction_from_name(py::cast<std::string>(v));
    else if (key == "label_smoothing") o.label_smoothing = py::cast<double>(v);
    else if (key == "z_loss") o.z_loss = py::cast<double>(v);
    else if (key == "softcap") o.softcap = v.is_none() ? 0.0 : py::cast<double>(v);
    else if (key == "chunk_size") o.chunk_size = py::cast<std::int64_t>(v);
    else if (key == "token_tile") o.token_tile = py::cast<std::int64_t>(v);
    else if (key == "memory_budget") o.memory_budget = py::cast<std::int64_t>(v);
    else if (key == "accumulate") o.accumulate = dtype_from_name(py::cast<std::string>(v));
    else
      fail("lmcore loss: unknown option '{}' (expected bias, class_weight, ignore_index, reduction, label_smoothing, "
           "z_loss, softcap, chunk_size, token_tile, memory_budget, accumulate)",
           key);
  }
  return o;
}

// A Python float becomes a scalar f64 tensor; anything else goes through to_tensor.
Tensor grad_tensor(const py::object& g) {
  if (py::isinstance<py::float_>(g) || py::isinstance<py::int_>(g)) return Tensor::full({}, py::cast<double>(g), DType::f64);
  return to_tensor(g, "grad_loss");
}

py::tuple result_tuple(const LossResult& r) { return py::make_tuple(r.loss, r.z_loss, r.lse); }
py::tuple output_tuple(const LinearCrossEntropyOutput& r) { return py::make_tuple(r.loss, r.z_loss, r.lse, r.d_hidden); }

}  // namespace

void bind_loss(py::module_& m) {
  m.def(
      "cross_entropy",
      [](const py::object& logits, const py::object& target, const py::kwargs& kw) {
        return result_tuple(cross_entropy(to_tensor(logits, "logits"), to_tensor(target, "target"), options_from(kw)));
      },
      py::arg("logits"), py::arg("target"),
      "Cross-entropy on logits [N, V] -> (loss, z_loss, lse). Options as keywords (see LossOptions).");
  m.def(
      "cross_entropy_backward",
      [](const py::object& logits, const py::object& target, const py::object& grad_loss, const py::object& lse,
         const py::kwargs& kw) {
        return cross_entropy_backward(to_tensor(logits, "logits"), to_tensor(target, "target"), grad_tensor(grad_loss),
                                      options_from(kw), optional_tensor(lse, "lse"));
      },
      py::arg("logits"), py::arg("target"), py::arg("grad_loss") = 1.0, py::arg("lse") = py::none(),
      "d loss / d logits [N, V].");
  m.def(
      "linear_cross_entropy",
      [](const py::object& h, const py::object& w, const py::object& t, const py::kwargs& kw) {
        return result_tuple(
            linear_cross_entropy(to_tensor(h, "hidden"), to_tensor(w, "weight"), to_tensor(t, "target"), options_from(kw)));
      },
      py::arg("hidden"), py::arg("weight"), py::arg("target"),
      "Fused linear cross-entropy forward -> (loss, z_loss, lse); the [N, V] logits are never materialised.");
  m.def(
      "linear_cross_entropy_backward",
      [](const py::object& h, const py::object& w, const py::object& t, const py::object& grad_loss,
         const py::object& lse, const py::object& d_weight, const py::object& d_bias, const py::kwargs& kw) {
        return linear_cross_entropy_backward(to_tensor(h, "hidden"), to_tensor(w, "weight"), to_tensor(t, "target"),
                                             grad_tensor(grad_loss), options_from(kw), optional_tensor(lse, "lse"),
                                             optional_tensor(d_weight, "d_weight"), optional_tensor(d_bias, "d_bias"));
      },
      py::arg("hidden"), py::arg("weight"), py::arg("target"), py::arg("grad_loss") = 1.0, py::arg("lse") = py::none(),
      py::arg("d_weight") = py::none(), py::arg("d_bias") = py::none(),
      "Returns d_hidden; ADDS into d_weight and d_bias when given.");
  m.def(
      "linear_cross_entropy_with_grad",
      [](const py::object& h, const py::object& w, const py::object& t, const py::object& grad_loss,
         const py::object& d_weight, const py::object& d_bias, const py::kwargs& kw) {
        return output_tuple(linear_cross_entropy_with_grad(
            to_tensor(h, "hidden"), to_tensor(w, "weight"), to_tensor(t, "target"), options_from(kw),
            grad_tensor(grad_loss), optional_tensor(d_weight, "d_weight"), optional_tensor(d_bias, "d_bias")));
      },
      py::arg("hidden"), py::arg("weight"), py::arg("target"), py::arg("grad_loss") = 1.0,
      py::arg("d_weight") = py::none(), py::arg("d_bias") = py::none(),
      "Forward and backward -> (loss, z_loss, lse, d_hidden); ADDS into d_weight and d_bias when given.");
  m.def(
      "linear_cross_entropy_unfused",
      [](const py::object& h, const py::object& w, const py::object& t, const py::kwargs& kw) {
        return result_tuple(linear_cross_entropy_unfused(to_tensor(h, "hidden"), to_tensor(w, "weight"),
                                                         to_tensor(t, "target"), options_from(kw)));
      },
      py::arg("hidden"), py::arg("weight"), py::arg("target"), "The unfused reference (full logits).");
  m.def(
      "linear_cross_entropy_unfused_with_grad",
      [](const py::object& h, const py::object& w, const py::object& t, const py::object& grad_loss,
         const py::object& d_weight, const py::object& d_bias, const py::kwargs& kw) {
        return output_tuple(linear_cross_entropy_unfused_with_grad(
            to_tensor(h, "hidden"), to_tensor(w, "weight"), to_tensor(t, "target"), options_from(kw),
            grad_tensor(grad_loss), optional_tensor(d_weight, "d_weight"), optional_tensor(d_bias, "d_bias")));
      },
      py::arg("hidden"), py::arg("weight"), py::arg("target"), py::arg("grad_loss") = 1.0,
      py::arg("d_weight") = py::none(), py::arg("d_bias") = py::none(), "The unfused reference, forward and backward.");

  py::class_<LinearCrossEntropyLoss>(m, "LinearCrossEntropyLoss",
                                     "Fused linear cross-entropy holding its weight (owned copy or tied).")
      .def_static(
          "owning",
          [](const py::object& w, const py::kwargs& kw) {
            return LinearCrossEntropyLoss::owning(to_tensor(w, "weight"), options_from(kw));
          },
          py::arg("weight"), "A private copy of weight and an f32 gradient buffer.")
      .def_static(
          "tied",
          [](const py::object& w, const py::object& g, const py::kwargs& kw) {
            return LinearCrossEntropyLoss::tied(to_tensor(w, "weight"), to_tensor(g, "weight_grad"), options_from(kw));
          },
          py::arg("weight"), py::arg("weight_grad"), "Shares weight; gradients are added into weight_grad.")
      .def_property_readonly("weight", &LinearCrossEntropyLoss::weight)
      .def_property_readonly("weight_grad", &LinearCrossEntropyLoss::weight_grad)
      .def_property_readonly("bias_grad", [](const LinearCrossEntropyLoss& l) -> py::object {
        if (!l.bias_grad().defined()) return py::none();
        return py::cast(l.bias_grad());
      })
      .def_property_readonly("owns_weight", &LinearCrossEntropyLoss::owns_weight)
      .def(
          "forward",
          [](LinearCrossEntropyLoss& l, const py::object& h, const py::object& t) {
            return result_tuple(l.forward(to_tensor(h, "hidden"), to_tensor(t, "target")));
          },
          py::arg("hidden"), py::arg("target"))
      .def(
          "backward", [](LinearCrossEntropyLoss& l, const py::object& g) { return l.backward(grad_tensor(g)); },
          py::arg("grad_loss") = 1.0)
      .def(
          "forward_backward",
          [](LinearCrossEntropyLoss& l, const py::object& h, const py::object& t, const py::object& g) {
            return output_tuple(l.forward_backward(to_tensor(h, "hidden"), to_tensor(t, "target"), grad_tensor(g)));
          },
          py::arg("hidden"), py::arg("target"), py::arg("grad_loss") = 1.0)
      .def("zero_grad", &LinearCrossEntropyLoss::zero_grad);
}

}  // namespace lmcore::python
