// Python bindings of checkpoint I/O: lmcore.load, lmcore.save_safetensors, lmcore.save_torch,
// lmcore.detect_format.
#include <pybind11/stl.h>

#include <fstream>

#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

py::object node_to_python(const io::Node& n) {
  switch (n.kind) {
    case io::Node::Kind::tensor: return py::cast(n.tensor);
    case io::Node::Kind::scalar: return py::str(n.text);
    case io::Node::Kind::list: {
      py::list l;
      for (const auto& v : n.children) l.append(node_to_python(v));
      return l;
    }
    case io::Node::Kind::dict: {
      py::dict d;
      for (std::size_t i = 0; i < n.children.size(); ++i) d[py::str(n.keys[i])] = node_to_python(n.children[i]);
      return d;
    }
  }
  return py::none();
}

io::NamedTensors named_tensors(const py::dict& tensors) {
  io::NamedTensors out;
  for (const auto& [k, v] : tensors) {
    const std::string name = py::cast<std::string>(k);
    const auto obj = py::reinterpret_borrow<py::object>(v);
    // torch 1.13 cannot export bool tensors through DLPack: take those through NumPy instead.
    if (py::hasattr(obj, "dtype") && py::hasattr(obj, "numpy") && py::str(obj.attr("dtype")).cast<std::string>() == "torch.bool")
      out.emplace_back(name, numpy_to_tensor(obj.attr("detach")().attr("cpu")().attr("numpy")()));
    else
      out.emplace_back(name, to_tensor(obj, name.c_str()));
  }
  return out;
}

}  // namespace

void bind_io(py::module_& m) {
  m.def(
      "load",
      [](const std::string& path, bool keep_structure, bool mmap, bool with_info, bool verify_crc) -> py::object {
        io::LoadOptions o;
        o.keep_structure = keep_structure;
        o.mmap = mmap;
        o.verify_crc = verify_crc;
        io::LoadResult r;
        {
          py::gil_scoped_release release;
          r = io::load(path, o);
        }
        py::object tensors;
        if (keep_structure && r.format != io::Format::safetensors && r.format != io::Format::npy &&
            r.format != io::Format::npz) {
          tensors = node_to_python(r.tree);
        } else {
          py::dict d;  // insertion-ordered: the file's order
          for (const auto& e : r.tensors) d[py::str(e.name)] = py::cast(e.tensor);
          tensors = std::move(d);
        }
        if (!with_info) return tensors;
        py::dict info;
        info["format"] = std::string(io::format_name(r.format));
        info["metadata"] = r.metadata;
        py::dict offsets;
        for (const auto& e : r.tensors) offsets[py::str(e.name)] = e.file_offset;
        info["offsets"] = offsets;
        return py::make_tuple(tensors, info);
      },
      py::arg("path"), py::arg("keep_structure") = false, py::arg("mmap") = true, py::arg("with_info") = false,
      py::arg("verify_crc") = false,
      "Loads a checkpoint (safetensors, PyTorch zip or legacy, .npy/.npz; format detected from the bytes) as a "
      "dict name -> lmcore.Tensor (dotted names for nested dicts; keep_structure=True returns the nesting). "
      "Tensors of mapped files are zero-copy, copy-on-write views. with_info=True returns (tensors, "
      "{'format', 'metadata', 'offsets'}). verify_crc=True also checks the CRC-32 of stored PyTorch zip entries "
      "(reads every byte).");
  m.def(
      "detect_format",
      [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        LMCORE_CHECK(in.good(), "detect_format: cannot open '{}'", path);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        return std::string(io::format_name(
            io::detect_format({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()})));
      },
      py::arg("path"), "The checkpoint format of a file, from its bytes.");
  m.def(
      "save_safetensors",
      [](const std::string& path, const py::dict& tensors, const std::map<std::string, std::string>& metadata) {
        const io::NamedTensors t = named_tensors(tensors);
        py::gil_scoped_release release;
        io::save_safetensors(path, t, metadata);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes a dict name -> tensor (lmcore, NumPy or torch) as safetensors, names sorted, atomically.");
  m.def(
      "save_torch",
      [](const std::string& path, const py::dict& tensors) {
        const io::NamedTensors t = named_tensors(tensors);
        py::gil_scoped_release release;
        io::save_torch(path, t);
      },
      py::arg("path"), py::arg("tensors"),
      "Writes a dict name -> tensor in torch.save's zip format (torch.load(weights_only=True) reads it), "
      "atomically; tensors sharing memory share a storage.");
}

}  // namespace lmcore::python
