// Python bindings of the tensor core's ops: comparisons, sort/topk, embedding, gather/scatter,
// reductions, matmul and casts. Tensor arguments accept lmcore.Tensor, NumPy arrays and anything with
// __dlpack__ (torch tensors), zero-copy; results are lmcore.Tensor. Argument names and defaults follow
// torch's so that tests can call both the same way.
#include <pybind11/stl.h>

#include "lmcore/core/compare.h"
#include "lmcore/core/copy.h"
#include "lmcore/core/embedding.h"
#include "lmcore/core/gather_scatter.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/reduce.h"
#include "lmcore/core/sort.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

// torch-style `dim`: None (every dim), an int, or a sequence of ints. Anything else is an Error naming
// what was given (pybind's own cast failure says only "Unable to cast Python instance").
Shape dims_arg(const py::object& dim, const char* op) {
  if (dim.is_none()) return {};
  const auto bad = [&](const py::handle& h) {
    fail("{}: argument 'dim' must be None, an int or a sequence of ints, found {} ({})", op,
         py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>(), py::repr(h).cast<std::string>());
  };
  // bool is an int subclass in Python; torch refuses it as a dim too.
  if (py::isinstance<py::bool_>(dim)) bad(dim);
  if (py::isinstance<py::int_>(dim)) return {dim.cast<std::int64_t>()};
  if (!py::isinstance<py::sequence>(dim) || py::isinstance<py::str>(dim)) bad(dim);
  Shape out;
  for (const py::handle& d : dim.cast<py::sequence>()) {
    if (!py::isinstance<py::int_>(d) || py::isinstance<py::bool_>(d)) bad(d);
    out.push_back(d.cast<std::int64_t>());
  }
  return out;
}

Tensor compare_any(CompareOp op, const py::object& a, const py::object& b) {
  const Tensor ta = to_tensor(a, "input");
  // Python numbers: bool and int compare as integers, float as a float scalar (torch's rules).
  if (py::isinstance<py::bool_>(b) || py::isinstance<py::int_>(b)) return compare_scalar(op, ta, b.cast<std::int64_t>());
  if (py::isinstance<py::float_>(b)) return compare_scalar(op, ta, b.cast<double>());
  return compare(op, ta, to_tensor(b, "other"));
}

void def_compare(py::module_& m, const char* name, CompareOp op) {
  m.def(
      name, [op](const py::object& a, const py::object& b) { return compare_any(op, a, b); }, py::arg("input"),
      py::arg("other"),
      "Elementwise comparison -> bool tensor; broadcasting, dtype promotion and NaN handling as torch. "
      "`other` may be a tensor or a Python number.");
}

using ReduceFn = Tensor (*)(const Tensor&, const Shape&, bool);

void def_reduce(py::module_& m, const char* name, ReduceFn fn, const char* doc) {
  m.def(
      name, [fn, name](const py::object& x, const py::object& dim, bool keepdim) { return fn(to_tensor(x, "input"), dims_arg(dim, name), keepdim); },
      py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, doc);
}

}  // namespace

void bind_core_ops(py::module_& m) {
  def_compare(m, "eq", CompareOp::eq);
  def_compare(m, "ne", CompareOp::ne);
  def_compare(m, "lt", CompareOp::lt);
  def_compare(m, "le", CompareOp::le);
  def_compare(m, "gt", CompareOp::gt);
  def_compare(m, "ge", CompareOp::ge);

  m.def(
      "sort",
      [](const py::object& x, std::int64_t dim, bool descending, bool stable) {
        SortResult r = sort(to_tensor(x, "input"), dim, descending, stable);
        return py::make_tuple(r.values, r.indices);
      },
      py::arg("input"), py::arg("dim") = -1, py::arg("descending") = false, py::arg("stable") = false,
      "(values, indices) sorted along dim; NaN is greater than everything; always stable.");
  m.def(
      "topk",
      [](const py::object& x, std::int64_t k, std::int64_t dim, bool largest, bool sorted) {
        SortResult r = topk(to_tensor(x, "input"), k, dim, largest, sorted);
        return py::make_tuple(r.values, r.indices);
      },
      py::arg("input"), py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true,
      "(values, indices) of the k largest (or smallest) along dim, always sorted.");

  m.def(
      "embedding",
      [](const py::object& weight, const py::object& indices, std::optional<std::int64_t> padding_idx) {
        return embedding(to_tensor(weight, "weight"), to_tensor(indices, "indices"), padding_idx);
      },
      py::arg("weight"), py::arg("indices"), py::arg("padding_idx") = py::none(),
      "weight [V, D], indices (i32/i64, any shape) -> [*indices.shape, D].");
  m.def(
      "embedding_backward",
      [](const py::object& grad, const py::object& indices, std::int64_t num_weights,
         std::optional<std::int64_t> padding_idx, bool scale_grad_by_freq) {
        return embedding_backward(to_tensor(grad, "grad_output"), to_tensor(indices, "indices"), num_weights, padding_idx,
                                  scale_grad_by_freq);
      },
      py::arg("grad_output"), py::arg("indices"), py::arg("num_weights"), py::arg("padding_idx") = py::none(),
      py::arg("scale_grad_by_freq") = false,
      "Dense weight gradient [num_weights, D]: duplicates summed in f32 (deterministic), padding row zero.");

  m.def(
      "gather", [](const py::object& x, std::int64_t dim, const py::object& index) {
        return gather(to_tensor(x, "input"), dim, to_tensor(index, "index"));
      },
      py::arg("input"), py::arg("dim"), py::arg("index"));
  m.def(
      "scatter",
      [](const py::object& self, std::int64_t dim, const py::object& index, const py::object& src) {
        const Tensor s = to_tensor(self, "self"), i = to_tensor(index, "index");
        if (py::isinstance<py::float_>(src) || py::isinstance<py::int_>(src)) return scatter(s, dim, i, src.cast<double>());
        return scatter(s, dim, i, to_tensor(src, "src"));
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"),
      "Out-of-place scatter; `src` may be a tensor or a number.");
  m.def(
      "scatter_add",
      [](const py::object& self, std::int64_t dim, const py::object& index, const py::object& src) {
        return scatter_add(to_tensor(self, "self"), dim, to_tensor(index, "index"), to_tensor(src, "src"));
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"));
  m.def(
      "scatter_reduce",
      [](const py::object& self, std::int64_t dim, const py::object& index, const py::object& src,
         const std::string& reduce, bool include_self) {
        return scatter_reduce(to_tensor(self, "self"), dim, to_tensor(index, "index"), to_tensor(src, "src"),
                              scatter_reduce_from_name(reduce), include_self);
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"), py::arg("reduce"),
      py::arg("include_self") = true, "reduce: 'sum', 'prod', 'amax', 'amin' or 'mean'.");
  m.def(
      "scatter_add_",
      [](const py::object& self, std::int64_t dim, const py::object& index, const py::object& src) {
        Tensor s = to_tensor(self, "self");
        scatter_add_(s, dim, to_tensor(index, "index"), to_tensor(src, "src"));
        return s;
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"),
      "In place: writes into the memory of `input` (zero-copy for NumPy/torch inputs).");

  def_reduce(m, "sum", &sum, "Sum over dim (None: all); ints/bool -> i64; bf16/f16 accumulate in f32.");
  def_reduce(m, "mean", &mean, "Mean over dim (None: all); floating inputs only.");
  def_reduce(m, "amax", &amax, "Max over dim (None: all); NaN propagates.");
  def_reduce(m, "amin", &amin, "Min over dim (None: all); NaN propagates.");
  def_reduce(m, "logsumexp", &logsumexp, "log(sum(exp(x))) over dim, computed stably.");
  m.def(
      "argmax", [](const py::object& x, std::optional<std::int64_t> dim, bool keepdim) { return argmax(to_tensor(x, "input"), dim, keepdim); },
      py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "argmin", [](const py::object& x, std::optional<std::int64_t> dim, bool keepdim) { return argmin(to_tensor(x, "input"), dim, keepdim); },
      py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);

  m.def(
      "matmul", [](const py::object& a, const py::object& b) { return matmul(to_tensor(a, "input"), to_tensor(b, "other")); },
      py::arg("input"), py::arg("other"), "torch.matmul semantics; bf16/f16 accumulate in f32.");
  m.def(
      "cast", [](const py::object& x, const std::string& dtype) { return to_tensor(x, "input").to(dtype_from_name(dtype)); },
      py::arg("input"), py::arg("dtype"), "A copy cast to dtype (round to nearest even; NaN/inf kept).");
  m.def(
      "copy_cast",
      [](const py::object& src, const py::object& dst) {
        Tensor d = to_tensor(dst, "dst");
        copy_cast(to_tensor(src, "src"), d);
        return d;
      },
      py::arg("src"), py::arg("dst"), "Writes cast(src) into dst's memory (broadcasting src), returns dst.");
}

}  // namespace lmcore::python
