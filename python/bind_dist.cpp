// Python bindings of lmcore::dist: lmcore.dist.ProcessGroup and its collectives, so a script run
// under `lmcore launch` can do
//
//   import lmcore, torch
//   pg = lmcore.dist.ProcessGroup()            # LMCORE_RANK / LMCORE_WORLD_SIZE / LMCORE_STORE
//   g = torch.ones(1024)
//   pg.all_reduce(g, op="avg")                 # in place, zero-copy through DLPack
//
// Tensors are NumPy arrays, torch tensors or lmcore.Tensor, viewed zero-copy. Blocking calls release
// the GIL. Errors raise lmcore.dist.DistError (a subclass of lmcore.Error) with .kind, .op, .seq
// and .missing_ranks.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string_view>

#include "lmcore/dist/flight_recorder.h"
#include "lmcore/dist/launch.h"
#include "lmcore/dist/process_group.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

using dist::ProcessGroup;
using dist::Work;

std::chrono::milliseconds seconds_to_ms(std::optional<double> s) {
  if (!s) return std::chrono::milliseconds(0);
  LMCORE_CHECK(*s > 0 && std::isfinite(*s), "timeout must be a positive number of seconds, found {}", *s);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(*s * 1000.0)));
}

dist::ReduceOp parse_op(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.rfind("reduceop.", 0) == 0) name = name.substr(9);
  return dist::reduce_op_from_name(name);
}

const char* kind_name(dist::DistErrorKind k) {
  switch (k) {
    case dist::DistErrorKind::mismatch: return "mismatch";
    case dist::DistErrorKind::timeout: return "timeout";
    case dist::DistErrorKind::peer_failure: return "peer_failure";
    case dist::DistErrorKind::aborted: return "aborted";
    case dist::DistErrorKind::broken: return "broken";
  }
  return "unknown";
}

// An async collective: holds the Python objects whose memory the collective uses.
struct PyWork {
  Work work;
  std::vector<py::object> keep;
  void wait(std::optional<double> timeout) {
    py::gil_scoped_release release;
    if (timeout) work.wait(seconds_to_ms(timeout)); else work.wait();
  }
};

dist::CallOptions call_opts(std::optional<double> timeout) {
  dist::CallOptions o;
  o.timeout = seconds_to_ms(timeout);
  return o;
}

dist::ReduceOptions reduce_opts(const std::string& op, double factor, std::optional<double> timeout) {
  dist::ReduceOptions o;
  o.op = parse_op(op);
  o.premul_factor = factor;
  o.timeout = seconds_to_ms(timeout);
  return o;
}

// async_op: returns a Work holding `keep` alive. Otherwise runs the blocking form without the GIL
// (blocking calls may run on this thread, skipping the hand-off to the group's worker).
template <typename Async, typename Blocking>
py::object finish(std::vector<py::object> keep, bool async_op, Async&& async_call, Blocking&& blocking_call) {
  if (async_op) return py::cast(PyWork{async_call(), std::move(keep)});
  {
    py::gil_scoped_release release;
    blocking_call();
  }
  return py::none();
}

// A deprecated alias: one FutureWarning per process through Python's warnings module (filters
// apply: under "error" it raises), and none from the C++ side.
void warn_deprecated(const char* old_name, const char* new_name) {
  if (!dist::claim_deprecation_warning(old_name)) return;
  const std::string msg = fmt::format("{} is deprecated, use {}", old_name, new_name);
  if (PyErr_WarnEx(PyExc_FutureWarning, msg.c_str(), 1) < 0) throw py::error_already_set();
}

}  // namespace

void bind_dist(py::module_& m) {
  py::module_ d = m.def_submodule("dist", "Process groups and collectives over Gloo (see lmcore/dist/process_group.h).");

  // Leaked on purpose: the translator may run until the interpreter is gone.
  static py::object& dist_error = *new py::object(py::reinterpret_steal<py::object>(
      PyErr_NewException("lmcore.dist.DistError", m.attr("Error").ptr(), nullptr)));
  d.attr("DistError") = dist_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dist::DistError& e) {
      py::gil_scoped_acquire gil;
      // Decoded leniently, as lmcore.Error's messages (module.cpp): a file name in it may not be UTF-8.
      const std::string_view what = e.what();
      py::object exc = dist_error(py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace")));
      exc.attr("kind") = kind_name(e.kind());
      exc.attr("op") = e.op();
      exc.attr("seq") = e.seq();
      exc.attr("missing_ranks") = py::cast(e.missing_ranks());
      PyErr_SetObject(dist_error.ptr(), exc.ptr());
    }
  });

  py::class_<PyWork>(d, "Work", "Handle of an async collective.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Waits for completion (timeout in seconds: when it passes first, raises DistError and aborts the group).")
      .def("is_completed", [](const PyWork& w) { return w.work.is_completed(); });

  py::class_<ProcessGroup>(d, "ProcessGroup",
                           "A process group. Unset arguments come from LMCORE_RANK, LMCORE_WORLD_SIZE, LMCORE_STORE.")
      .def(py::init([](int rank, int world_size, std::optional<std::string> store, const std::string& name,
                       std::optional<double> timeout, std::optional<std::string> host, std::optional<std::string> trace_dir) {
             dist::GroupOptions o;
             o.rank = rank;
             o.world_size = world_size;
             if (store) o.store_url = *store;
             o.name = name;
             if (timeout) o.timeout = seconds_to_ms(timeout);
             if (host) o.host = *host;
             if (trace_dir) o.trace_dir = *trace_dir;
             py::gil_scoped_release release;
             return ProcessGroup(o);
           }),
           py::arg("rank") = -1, py::arg("world_size") = -1, py::arg("store") = py::none(), py::arg("name") = "pg",
           py::arg("timeout") = py::none(), py::arg("host") = py::none(), py::arg("trace_dir") = py::none())
      .def_static("join",
                  [](std::optional<std::string> store, const std::string& name, std::optional<double> timeout,
                     double wait) {
                    dist::GroupOptions o;
                    if (store) o.store_url = *store;
                    o.name = name;
                    if (timeout) o.timeout = seconds_to_ms(timeout);
                    py::gil_scoped_release release;
                    return ProcessGroup::join(o, seconds_to_ms(wait));
                  },
                  py::arg("store") = py::none(), py::arg("name") = "pg", py::arg("timeout") = py::none(),
                  py::arg("wait") = 60.0, "For a restarted rank: join at the members' next reconfigure().")
      .def_property_readonly("rank", &ProcessGroup::rank)
      .def_property_readonly("world_size", &ProcessGroup::world_size)
      .def_property_readonly("generation", &ProcessGroup::generation)
      .def_property_readonly("is_broken", &ProcessGroup::is_broken)
      .def_property("timeout", [](const ProcessGroup& pg) { return pg.timeout().count() / 1000.0; },
                    [](ProcessGroup& pg, double s) { pg.set_timeout(seconds_to_ms(s)); })
      .def("all_reduce",
           [](ProcessGroup& pg, const py::object& t, const std::string& op, double premul_factor,
              std::optional<double> timeout, bool async_op) {
             Tensor x = to_tensor(t, "tensor");
             const auto o = reduce_opts(op, premul_factor, timeout);
             return finish({t}, async_op, [&] { return pg.all_reduce_async(x, o); }, [&] { pg.all_reduce(x, o); });
           },
           py::arg("tensor"), py::arg("op") = "sum", py::arg("premul_factor") = 1.0, py::arg("timeout") = py::none(),
           py::arg("async_op") = false)
      .def("broadcast",
           [](ProcessGroup& pg, const py::object& t, int src, std::optional<double> timeout, bool async_op) {
             Tensor x = to_tensor(t, "tensor");
             const auto o = call_opts(timeout);
             return finish({t}, async_op, [&] { return pg.broadcast_async(x, src, o); }, [&] { pg.broadcast(x, src, o); });
           },
           py::arg("tensor"), py::arg("src"), py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("all_gather_single",
           [](ProcessGroup& pg, const py::object& out, const py::object& in, std::optional<double> timeout, bool async_op) {
             Tensor o = to_tensor(out, "output"), i = to_tensor(in, "input");
             const auto c = call_opts(timeout);
             return finish({out, in}, async_op, [&] { return pg.all_gather_single_async(o, i, c); },
                           [&] { pg.all_gather_single(o, i, c); });
           },
           py::arg("output"), py::arg("input"), py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("reduce_scatter_single",
           [](ProcessGroup& pg, const py::object& out, const py::object& in, const std::string& op, double premul_factor,
              std::optional<double> timeout, bool async_op) {
             Tensor o = to_tensor(out, "output"), i = to_tensor(in, "input");
             const auto c = reduce_opts(op, premul_factor, timeout);
             return finish({out, in}, async_op, [&] { return pg.reduce_scatter_single_async(o, i, c); },
                           [&] { pg.reduce_scatter_single(o, i, c); });
           },
           py::arg("output"), py::arg("input"), py::arg("op") = "sum", py::arg("premul_factor") = 1.0,
           py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("all_to_all_single",
           [](ProcessGroup& pg, const py::object& out, const py::object& in,
              std::optional<std::vector<std::int64_t>> output_split_sizes,
              std::optional<std::vector<std::int64_t>> input_split_sizes, std::optional<double> timeout, bool async_op) {
             Tensor o = to_tensor(out, "output"), i = to_tensor(in, "input");
             dist::AllToAllOptions c;
             c.output_split_sizes = output_split_sizes.value_or(std::vector<std::int64_t>{});
             c.input_split_sizes = input_split_sizes.value_or(std::vector<std::int64_t>{});
             c.timeout = seconds_to_ms(timeout);
             return finish({out, in}, async_op, [&] { return pg.all_to_all_single_async(o, i, c); },
                           [&] { pg.all_to_all_single(o, i, c); });
           },
           py::arg("output"), py::arg("input"), py::arg("output_split_sizes") = py::none(),
           py::arg("input_split_sizes") = py::none(), py::arg("timeout") = py::none(), py::arg("async_op") = false,
           "Split sizes (rows along dim 0 to / from each rank) as in torch; None: equal splits.")
      .def("barrier",
           [](ProcessGroup& pg, std::optional<double> timeout, bool async_op) {
             const auto c = call_opts(timeout);
             return finish({}, async_op, [&] { return pg.barrier_async(c); }, [&] { pg.barrier(c); });
           },
           py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("send",
           [](ProcessGroup& pg, const py::object& t, int dst, std::optional<double> timeout, bool async_op) {
             Tensor x = to_tensor(t, "tensor");
             const auto c = call_opts(timeout);
             return finish({t}, async_op, [&] { return pg.send_async(x, dst, c); }, [&] { pg.send(x, dst, c); });
           },
           py::arg("tensor"), py::arg("dst"), py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("recv",
           [](ProcessGroup& pg, const py::object& t, int src, std::optional<double> timeout, bool async_op) {
             Tensor x = to_tensor(t, "tensor");
             const auto c = call_opts(timeout);
             return finish({t}, async_op, [&] { return pg.recv_async(x, src, c); }, [&] { pg.recv(x, src, c); });
           },
           py::arg("tensor"), py::arg("src"), py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def("all_gather_into_tensor",
           [](ProcessGroup& pg, const py::object& out, const py::object& in, std::optional<double> timeout) {
             warn_deprecated("all_gather_into_tensor", "all_gather_single");
             Tensor o = to_tensor(out, "output"), i = to_tensor(in, "input");
             py::gil_scoped_release release;
             pg.all_gather_single(o, i, call_opts(timeout));
           },
           py::arg("output"), py::arg("input"), py::arg("timeout") = py::none())
      .def("reduce_scatter_tensor",
           [](ProcessGroup& pg, const py::object& out, const py::object& in, const std::string& op,
              std::optional<double> timeout) {
             warn_deprecated("reduce_scatter_tensor", "reduce_scatter_single");
             Tensor o = to_tensor(out, "output"), i = to_tensor(in, "input");
             py::gil_scoped_release release;
             pg.reduce_scatter_single(o, i, reduce_opts(op, 1.0, timeout));
           },
           py::arg("output"), py::arg("input"), py::arg("op") = "sum", py::arg("timeout") = py::none())
      .def("abort", [](ProcessGroup& pg) { pg.abort(); }, "Releases blocked calls from any thread; the group is unusable after.")
      .def("shrink",
           [](ProcessGroup& pg, double window) {
             dist::ShrinkOptions o;
             o.window = seconds_to_ms(window);
             py::gil_scoped_release release;
             return pg.shrink(o);
           },
           py::arg("window") = 3.0, "Survivors agree on who is alive and get a new group with renumbered ranks.")
      .def("reconfigure",
           [](ProcessGroup& pg, double window, int min_joiners) {
             dist::ShrinkOptions o;
             o.window = seconds_to_ms(window);
             o.min_joiners = min_joiners;
             py::gil_scoped_release release;
             return pg.reconfigure(o);
           },
           py::arg("window") = 3.0, py::arg("min_joiners") = 0, "Like shrink(), also admitting ranks waiting in join().")
      .def("trace_json", &ProcessGroup::trace_json)
      .def(
          "dump_trace",
          [](ProcessGroup& g, const std::optional<std::filesystem::path>& p) {
            return g.dump_trace(p ? p->string() : "");
          },
          py::arg("path") = py::none());  // not path(""): it reaches Python as Path(""), which is Path(".")

  d.def("analyze_traces",
        [](const std::vector<std::filesystem::path>& paths) {
          std::vector<dist::TraceDump> dumps;
          for (const auto& p : paths) dumps.push_back(dist::load_trace_dump(p.string()));
          const dist::TraceAnalysis a = dist::analyze_traces(dumps);
          py::dict r;
          r["agree"] = a.agree;
          r["first_seq"] = a.first_seq;
          r["op"] = a.op;
          r["missing_ranks"] = a.missing_ranks;
          r["differing_ranks"] = a.differing_ranks;
          r["report"] = a.report;
          return r;
        },
        py::arg("paths"), "Compares flight-recorder dumps (one per rank), like `lmcore trace`.");

  d.def("launch",
        [](const std::vector<std::string>& command, int nproc, int nnodes, int node_rank, std::optional<std::string> store,
           bool keep_going, int restart_failed, double kill_grace) {
          dist::LaunchOptions o;
          o.command = command;
          o.nproc = nproc;
          o.nnodes = nnodes;
          o.node_rank = node_rank;
          if (store) o.store = *store;
          o.keep_going = keep_going;
          o.restart_failed = restart_failed;
          LMCORE_CHECK(kill_grace >= 0 && std::isfinite(kill_grace), "launch: kill_grace {} s must be >= 0", kill_grace);
          o.kill_grace = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(kill_grace * 1000.0)));
          py::gil_scoped_release release;
          return dist::launch(o);
        },
        py::arg("command"), py::arg("nproc") = 1, py::arg("nnodes") = 1, py::arg("node_rank") = 0,
        py::arg("store") = py::none(), py::arg("keep_going") = false, py::arg("restart_failed") = 0,
        py::arg("kill_grace") = 3.0,
        "Runs `command` (a list: program and arguments) as nproc local ranks with the LMCORE_* environment, as "
        "`lmcore launch` does; their lines go to this process's stdout/stderr (file descriptors 1 and 2) prefixed "
        "with [rank R]. Returns the job's exit status (0, a failed rank's, or 128 + the signal that stopped it: "
        "Ctrl-C while it runs stops the ranks and returns 130 instead of raising KeyboardInterrupt). Options are "
        "checked first (lmcore.Error naming the option). See lmcore/dist/launch.h.");
}

}  // namespace lmcore::python
