// Python bindings of checkpoint I/O: lmcore.load, lmcore.save_safetensors, lmcore.save_torch,
// lmcore.detect_format, lmcore.convert.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>

#include "lmcore/base/file.h"
#include "lmcore/io/checkpoint.h"
#include "lmcore/io/convert.h"
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

std::string type_name(const py::handle& h) { return py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>(); }

io::NamedTensors named_tensors(const py::dict& tensors, const char* fn) {
  io::NamedTensors out;
  for (const auto& [k, v] : tensors) {
    if (!py::isinstance<py::str>(k))
      fail("{}: tensor names must be str, found {} ({})", fn, type_name(k), py::repr(k).cast<std::string>());
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
      [](const std::filesystem::path& path_arg, bool keep_structure, bool mmap, bool with_info,
         bool verify_crc) -> py::object {
        const std::string path = path_arg.string();
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
      "(reads every byte). A mapped file must not be truncated or rewritten in place by another program while "
      "its tensors are in use: the next read of a vanished page kills the process with SIGBUS (lmcore prints "
      "which file it was). Load with mmap=False to read the file into memory instead.");
  m.def(
      "detect_format",
      [](const std::filesystem::path& path) {
        // Regular files only: a FIFO would block.
        const std::string bytes = base::read_file(path.string(), "detect_format");
        return std::string(io::format_name(
            io::detect_format({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()})));
      },
      py::arg("path"), "The checkpoint format of a file, from its bytes.");
  m.def(
      "output_format_for",
      [](const std::filesystem::path& path) {
        return std::string(io::format_name(io::output_format_for(path.string())));
      },
      py::arg("path"),
      "The format a checkpoint written to `path` gets from its extension, as `lmcore convert` decides it: "
      "'safetensors' (.safetensors), 'pytorch-zip' (.pt, .pth, .bin, .ckpt) or 'unknown'.");
  m.def(
      "save_safetensors",
      [](const std::filesystem::path& path_arg, const py::dict& tensors, const py::dict& metadata) {
        const std::string path = path_arg.string();
        const io::NamedTensors t = named_tensors(tensors, "save_safetensors");
        std::map<std::string, std::string> meta;
        for (const auto& [k, v] : metadata) {
          if (!py::isinstance<py::str>(k) || !py::isinstance<py::str>(v))
            fail("save_safetensors: metadata must map str to str, found {} -> {} ({}: {})", type_name(k), type_name(v),
                 py::repr(k).cast<std::string>(), py::repr(v).cast<std::string>());
          meta[py::cast<std::string>(k)] = py::cast<std::string>(v);
        }
        py::gil_scoped_release release;
        io::save_safetensors(path, t, meta);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = py::dict(),
      "Writes a dict name -> tensor (lmcore, NumPy or torch) as safetensors, names sorted, atomically.");
  m.def(
      "save_torch",
      [](const std::filesystem::path& path_arg, const py::dict& tensors) {
        const std::string path = path_arg.string();
        const io::NamedTensors t = named_tensors(tensors, "save_torch");
        py::gil_scoped_release release;
        io::save_torch(path, t);
      },
      py::arg("path"), py::arg("tensors"),
      "Writes a dict name -> tensor in torch.save's zip format (torch.load(weights_only=True) reads it), "
      "atomically; tensors sharing memory share a storage.");
  m.def(
      "convert",
      [](const std::filesystem::path& src_arg, const std::filesystem::path& dst_arg,
         const std::optional<std::string>& to) {
        const std::string src = src_arg.string(), dst = dst_arg.string();
        io::ConvertOptions o;
        if (to) {
          LMCORE_CHECK(*to == "safetensors" || *to == "torch", "convert: to must be 'safetensors' or 'torch', found '{}'",
                       *to);
          o.to = *to == "safetensors" ? io::Format::safetensors : io::Format::torch_zip;
        }
        io::ConvertResult r;
        {
          py::gil_scoped_release release;
          r = io::convert(src, dst, o);
        }
        py::dict d;
        d["from"] = std::string(io::format_name(r.from));
        d["to"] = std::string(io::format_name(r.to));
        d["tensors"] = r.tensors;
        d["bytes"] = r.bytes;
        return d;
      },
      py::arg("src"), py::arg("dst"), py::arg("to") = py::none(),
      "Converts a checkpoint (any format load() reads) to safetensors or PyTorch zip ('torch'; default: from dst's "
      "extension), writes dst atomically, reads it back and checks every tensor's name, dtype, shape and bytes. "
      "dst must be missing or a regular file (a FIFO, device, directory or symlink is refused). Returns "
      "{'from', 'to', 'tensors', 'bytes'}. `lmcore convert` is the same function.");
}

}  // namespace lmcore::python
