// The extension module lmcore._lmcore (python/lmcore/__init__.py re-exports it as `lmcore`). Each part
// binds its API in python/bind_<part>.cpp.
#include <pybind11/pybind11.h>

#include "lmcore/core/error.h"
#include "lmcore/version.h"

namespace py = pybind11;

namespace lmcore::python {
void bind_core(py::module_& m);
void bind_dist(py::module_& m);
void bind_attention(py::module_& m);
void bind_io(py::module_& m);
void bind_loss(py::module_& m);
void bind_model(py::module_& m);
void bind_text(py::module_& m);
}  // namespace lmcore::python

PYBIND11_MODULE(_lmcore, m) {
  m.doc() = "lmcore: LLM training kernels, checkpoint I/O and collectives in C++";
  m.attr("__version__") = LMCORE_VERSION_STRING;
  // lmcore::Error becomes lmcore.Error, a ValueError (bad input is what it reports).
  static py::exception<lmcore::Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lmcore::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
  lmcore::python::bind_core(m);
  lmcore::python::bind_dist(m);
  lmcore::python::bind_attention(m);
  lmcore::python::bind_io(m);
  lmcore::python::bind_loss(m);
  lmcore::python::bind_model(m);
  lmcore::python::bind_text(m);
}
