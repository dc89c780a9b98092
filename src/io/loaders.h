// Private: one loader per readable format, called by load() once the format is detected.
#pragma once

#include <memory>
#include <string>

#include "lmcore/io/checkpoint.h"
#include "src/io/file_util.h"
#include "src/io/pickle.h"
#include "src/io/zip_reader.h"

namespace lmcore::io::detail {

LoadResult load_safetensors(const std::shared_ptr<FileBytes>& file, const std::string& name);
LoadResult load_torch_zip(const std::shared_ptr<FileBytes>& file, const ZipReader& zip, const std::string& name,
                          const LoadOptions& options);
LoadResult load_torch_legacy(const std::shared_ptr<FileBytes>& file, const std::string& name,
                             const LoadOptions& options);
LoadResult load_npy(const std::shared_ptr<FileBytes>& file, const std::string& name);
LoadResult load_npz(const std::shared_ptr<FileBytes>& file, const ZipReader& zip, const std::string& name);

// Walks an unpickled object into `result`: tensors under dotted names, other leaves into metadata,
// and the structure into result.tree when options.keep_structure. Depth-limited and budgeted, so
// cyclic or exponentially shared pickles are refused.
void pickle_to_result(const Unpickler& u, std::uint32_t root, const FileBytes& file, const LoadOptions& options,
                      LoadResult& result);

// The data.pkl entry of a PyTorch zip ("<archive>/data.pkl"), or nullptr.
const ZipEntry* find_torch_pickle(const ZipReader& zip);

// Byte-swaps `n` elements of `size` bytes in place (big-endian archives).
void byteswap_elements(std::byte* data, std::size_t n, std::size_t size);

}  // namespace lmcore::io::detail
