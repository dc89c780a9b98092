// lmcore/io/safetensors.h — the safetensors format: header parsing (for load() and `lmcore inspect`)
// and the writer.
//
// Format (https://github.com/huggingface/safetensors):
//   [8 bytes: N, little-endian u64][N bytes: UTF-8 JSON object][data]
// The JSON maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
// offsets relative to the start of the data; an optional "__metadata__" maps strings to strings.
// Rules enforced, as the reference implementation does: N <= 100,000,000; the header starts with '{'
// and is valid UTF-8 JSON (trailing spaces allowed); no duplicate keys; every tensor's byte span equals
// shape x dtype size (overflow-checked); sorted by offset, the spans are contiguous from 0, without
// holes or overlaps, and end exactly at the end of the file.
//
//   lmcore::io::save_safetensors("m.safetensors", {{"w", w}, {"b", b}}, {{"step", "100"}});
//   auto header = lmcore::io::parse_safetensors_header(bytes, "m.safetensors");
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lmcore/core/tensor.h"
#include "lmcore/io/checkpoint.h"

namespace lmcore::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // relative to data_start
};

struct SafetensorsHeader {
  std::uint64_t header_size = 0;  // N
  std::uint64_t data_start = 0;   // 8 + N
  std::vector<SafetensorsTensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

// Parses and validates the header of a whole safetensors file `file` (all of its bytes, so that the
// spans can be checked against the file size). Throws Error naming `name`, the tensor and the rule.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& name);

// The safetensors dtype name ("F32", "BF16", "F8_E4M3", ...) and back (throws for unknown names).
std::string_view safetensors_dtype_name(DType dtype);
DType safetensors_dtype_from_name(std::string_view name, const std::string& context);

// Writes `tensors` (any strides; written contiguous) with names sorted and the header padded with
// spaces to a multiple of 8 bytes, atomically (temporary file, fsync, rename). Duplicate names throw.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace lmcore::io
