// lmcore/upgrade/cuda_check.h — PyTorch 2.13 needs CUDA 13.0 or later: what is installed here
// (UPG301 toolkit, UPG302 runtime) and what the scanned tree pins (UPG303..UPG306).
//
//   for (const auto& c : upgrade::probe_cuda({})) fmt::print("{} {} {}\n", c.component, c.version, c.path);
//   auto kind = upgrade::pin_file_kind("docker/Dockerfile.train");   // PinFileKind::dockerfile
//   auto findings = upgrade::check_pin_text(text, *kind);
//
// Pins are read line by line with '#' comments removed (a '#' at line start or after whitespace,
// so URL fragments stay); see the UPG3xx explanations in rules.h for the exact patterns.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcore/upgrade/rules.h"

namespace lmcore::upgrade {

struct CudaComponent {
  std::string component;  // "toolkit" or "runtime"
  std::string source;     // "nvcc --version", "version.json", "cudaRuntimeGetVersion", "file name"
  std::string path;
  std::string version;    // as reported, e.g. "13.0.88" or "13.0"
  int major = 0, minor = 0;
};

// Looks for CUDA installs. With `roots` empty: $CUDA_HOME, $CUDA_PATH, nvcc on $PATH, every
// /usr/local/cuda*, and libcudart in the system library folders. With `roots` given: only those
// folders (their bin/nvcc, version.json, lib64/ and lib/). Duplicates (same real path) are dropped.
std::vector<CudaComponent> probe_cuda(const std::vector<std::filesystem::path>& roots);

// UPG301/UPG302 findings for components older than 13.0 (path = the component's file).
std::vector<Finding> cuda_component_findings(const std::vector<CudaComponent>& found);

enum class PinFileKind { requirements, conda, dockerfile, shell, config };

// Which pin checks apply to a file, by name; nullopt for files that are not checked for pins.
std::optional<PinFileKind> pin_file_kind(const std::filesystem::path& path);

// UPG303..UPG306 findings in a pin file's text (lines 1-based, path left empty).
std::vector<Finding> check_pin_text(std::string_view text, PinFileKind kind);

// The same checks on one line (a notebook `!pip install ...`), reported at `line`, columns offset by
// `col_offset` characters.
std::vector<Finding> check_pin_line(std::string_view line_text, int line, int col_offset, PinFileKind kind);

}  // namespace lmcore::upgrade
