// lmcore/io/checkpoint.h — load a checkpoint file, whatever its format, detected from its bytes.
//
// load() looks at the first bytes of the file (never at its name) and reads:
//   * safetensors           — memory-mapped; every tensor is a zero-copy view of the mapping;
//   * PyTorch zip            — torch.save since 1.6 (data.pkl + data/<key> + byteorder + version),
//                              through a weights-only unpickler (no code from the file ever runs);
//                              uncompressed, aligned storages are zero-copy views of the mapping;
//   * legacy PyTorch         — torch.save before 1.6 (or _use_new_zipfile_serialization=False);
//   * NumPy .npy and .npz.
// It recognises GGUF and other zip archives and names them in its error; unknown bytes get an
// error that shows the first bytes of the file.
//
// Mapped tensors are copy-on-write (MAP_PRIVATE): writing to a loaded tensor never changes the file.
// The mapping lives as long as any tensor that views it.
//
// A mapped file must not be truncated or rewritten in place while its tensors are in use: the kernel
// then has no page to give, and the next read of one kills the process with SIGBUS, which no library
// can turn into an exception. lmcore prints which file it was and what to do before the process ends.
// Writers that replace the file (rename a new one over it, as lmcore's and torch's atomic savers do)
// are safe: the mapping keeps the old content. When another program may rewrite a file in place, load
// it with LoadOptions::mmap = false (Python: lmcore.load(path, mmap=False)), which reads it into memory.
// Only regular files are read; a FIFO, device or directory is refused without blocking.
//
//   lmcore::io::LoadResult r = lmcore::io::load("model.safetensors");
//   for (const auto& e : r.tensors) fmt::print("{} {}\n", e.name, e.tensor.describe());
//   Tensor wte = r.tensors.at("wte");
//   std::string fmt_name(lmcore::io::format_name(r.format));   // "safetensors"
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::io {

// File formats that detect_format() recognises. Append-only.
enum class Format : std::uint8_t {
  unknown = 0,
  safetensors = 1,
  torch_zip = 2,     // torch.save >= 1.6
  torch_legacy = 3,  // torch.save < 1.6 (pickle stream with the legacy magic number)
  npy = 4,
  npz = 5,
  gguf = 6,
  zip = 7,           // a zip archive that is neither a PyTorch checkpoint nor .npz
};

std::string_view format_name(Format format);

// Detects the format from a file's bytes. Pass the whole file: for zip archives the central directory
// tells a PyTorch checkpoint (a data.pkl entry) from .npz (.npy entries) and other archives; with only
// the first bytes of a zip the answer is `zip`.
Format detect_format(std::span<const std::byte> bytes);

// One named tensor. `file_offset` is the byte offset in the file where the tensor's first element is
// stored, or -1 when the tensor does not live in the file as-is (compressed, byte-swapped, legacy).
// A pickled checkpoint that holds a single tensor gives one entry named "tensor"; a lone .npy file
// gives one named "array". requires_grad of pickled parameters is not kept.
struct Entry {
  std::string name;
  Tensor tensor;
  std::int64_t file_offset = -1;
};

// An ordered state dict: the order is the file's order.
class StateDict {
 public:
  void add(std::string name, Tensor tensor, std::int64_t file_offset = -1);
  // Throws Error naming the missing key.
  const Tensor& at(std::string_view name) const;
  const Entry* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Entry>& entries() { return entries_; }

 private:
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// The structure of a pickled checkpoint, kept when LoadOptions::keep_structure is set: dicts keep
// their (stringified) keys in order, lists/tuples keep their items; leaves are tensors, or scalars
// rendered as text (ints, floats, strings, bools, None).
struct Node {
  enum class Kind : std::uint8_t { tensor, dict, list, scalar };
  Kind kind = Kind::scalar;
  Tensor tensor;                                     // kind == tensor
  std::string text;                                  // kind == scalar: repr-like text, e.g. "5", "'adam'"
  // dict: keys in order; list: "0", "1", ... children[i] is the value under keys[i]. (Two vectors, not
  // a vector of pairs: std::pair needs a complete Node, and clang's libstdc++ use enforces that.)
  std::vector<std::string> keys;
  std::vector<Node> children;
};

struct LoadOptions {
  // Also return the nested structure of pickled checkpoints in LoadResult::tree (the flat, dotted
  // state dict is always returned).
  bool keep_structure = false;
  // Memory-map the file (zero-copy). When false, the whole file is read into memory instead.
  bool mmap = true;
  // PyTorch zip: also check the CRC-32 of stored (uncompressed) entries, tensor data included.
  // Off by default because it reads every byte at load time, which is what the zero-copy mapping
  // avoids (a 1 GiB checkpoint would pay a full pass before the first tensor is used). The zip
  // structure, its sizes and offsets are always validated, and compressed entries and small records
  // (byteorder, .npz arrays) are always CRC-checked since they are copied anyway. Turn it on to
  // detect bit rot or a damaged download; `lmcore convert` does.
  bool verify_crc = false;
  // Largest pickle nesting depth accepted (deeper pickles are refused as hostile).
  int max_depth = 200;
};

struct LoadResult {
  Format format = Format::unknown;
  StateDict tensors;
  // safetensors: the __metadata__ map; pickles: non-tensor leaves by dotted name (e.g. "epoch" -> "5");
  // npy/npz: nothing.
  std::map<std::string, std::string> metadata;
  Node tree;  // only with keep_structure and a pickled format
};

// Loads `path`. Throws Error naming the file and the problem for anything it cannot read.
LoadResult load(const std::string& path, const LoadOptions& options = {});

// Loads from bytes in memory (the bytes are copied into a buffer the tensors own). `name` is used in
// error messages.
LoadResult load_bytes(std::span<const std::byte> bytes, const std::string& name, const LoadOptions& options = {});

}  // namespace lmcore::io
