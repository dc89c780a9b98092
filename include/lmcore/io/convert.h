// lmcore/io/convert.h — checked conversion of a checkpoint into safetensors or PyTorch's zip format:
// load IN (any format load() reads, with the CRC-32 of stored zip entries checked too, since every
// byte is read anyway), write OUT atomically, read OUT back and compare every tensor — name, dtype,
// shape and bytes — with IN. `lmcore convert` and `lmcore.convert` are this function.
//
//   io::ConvertResult r = io::convert("model.pt", "model.safetensors");   // format from the extension
//   io::convert("w.npz", "w.bin", {.to = io::Format::torch_zip});
//
// OUT must be missing or a regular file: a FIFO, a device, a directory or a symbolic link there is
// refused before anything is written (see lmcore/base/atomic_file.h; a link is not written through —
// pass its target). A conversion that fails or is interrupted leaves OUT as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lmcore/io/checkpoint.h"

namespace lmcore::io {

struct ConvertOptions {
  // Format::safetensors or Format::torch_zip; Format::unknown takes it from OUT's extension
  // (output_format_for).
  Format to = Format::unknown;
};

struct ConvertResult {
  Format from = Format::unknown;  // IN's format, as detected
  Format to = Format::unknown;    // OUT's, as read back
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;  // tensor bytes, all tensors
};

// The output format an extension names: .safetensors -> safetensors; .pt .pth .bin .ckpt -> torch_zip;
// anything else -> unknown.
Format output_format_for(const std::string& path);

// Throws Error naming the file, the tensor and what differs.
ConvertResult convert(const std::string& in, const std::string& out, const ConvertOptions& options = {});

}  // namespace lmcore::io
