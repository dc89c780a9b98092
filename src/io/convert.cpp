// Checked conversion; see lmcore/io/convert.h.
#include "lmcore/io/convert.h"

#include <cstring>
#include <filesystem>

#include "lmcore/base/atomic_file.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"

namespace lmcore::io {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0);
}

}  // namespace

Format output_format_for(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".safetensors") return Format::safetensors;
  if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt") return Format::torch_zip;
  return Format::unknown;
}

ConvertResult convert(const std::string& in, const std::string& out, const ConvertOptions& options) {
  Format to = options.to == Format::unknown ? output_format_for(out) : options.to;
  LMCORE_CHECK(to != Format::unknown, "convert: cannot tell the output format from '{}'; name it (safetensors or torch)",
               out);
  LMCORE_CHECK(to == Format::safetensors || to == Format::torch_zip,
               "convert: cannot write {}, expected safetensors or pytorch-zip", format_name(to));

  // 1. Read IN, checking every CRC (every byte is read anyway), once OUT is known to be writable: a
  // typo in its directory should not cost a read of a large checkpoint.
  base::check_can_create(out, "convert");
  LoadOptions verify;
  verify.verify_crc = true;
  const LoadResult src = load(in, verify);

  // 2. Write OUT atomically.
  if (to == Format::safetensors) save_safetensors(out, src.tensors, src.metadata);
  else save_torch(out, src.tensors);

  // 3. Read OUT back and compare every tensor with IN.
  const LoadResult back = load(out, verify);
  LMCORE_CHECK(back.format == to, "convert: {} reads back as {}, expected {}", out, format_name(back.format),
               format_name(to));
  LMCORE_CHECK(back.tensors.size() == src.tensors.size(), "convert: {} holds {} tensors, expected {}", out,
               back.tensors.size(), src.tensors.size());
  ConvertResult r;
  r.from = src.format;
  r.to = back.format;
  r.tensors = src.tensors.size();
  for (const auto& e : src.tensors) {
    const Entry* b = back.tensors.find(e.name);
    LMCORE_CHECK(b != nullptr, "convert: tensor '{}' is missing from {}", e.name, out);
    LMCORE_CHECK(b->tensor.dtype() == e.tensor.dtype() && b->tensor.shape() == e.tensor.shape(),
                 "convert: tensor '{}' reads back from {} as {}, expected {}", e.name, out, b->tensor.describe(),
                 e.tensor.describe());
    LMCORE_CHECK(same_bytes(b->tensor, e.tensor), "convert: tensor '{}' differs in {} after the round trip", e.name, out);
    r.bytes += e.tensor.nbytes();
  }
  return r;
}

}  // namespace lmcore::io
