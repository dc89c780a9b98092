// lmcore/upgrade/rules.h — the rule codes of `lmcore upgrade-check` and the finding they produce.
//
//   for (const auto& r : upgrade::all_rules()) fmt::print("{} {}\n", r.code, r.summary);
//   const upgrade::Rule* r = upgrade::find_rule("UPG101");
//
// Codes are stable: a code is never reused for a different check; new checks get new codes.
//   UPG1xx  torch.distributed collectives renamed in PyTorch 2.13 (fixable)
//   UPG2xx  named tensors, removed in PyTorch 2.13 (guidance; each finding carries a confidence)
//   UPG3xx  CUDA older than 13.0: the installed toolkit/runtime, and pins in the scanned tree
//   UPG9xx  the scan itself: unreadable files, encodings, syntax errors, bad notebooks
//
// The rename mapping (UPG101..UPG104), as lmcore applies it:
//   torch.distributed.all_gather_into_tensor            -> all_gather_single
//   torch.distributed.reduce_scatter_tensor             -> reduce_scatter_single
//   torch.distributed._functional_collectives.all_gather_tensor          -> all_gather_single
//   torch.distributed._functional_collectives.all_gather_tensor_autograd -> all_gather_single_autograd
//   torch.distributed._functional_collectives.reduce_scatter_tensor      -> reduce_scatter_single
//   torch.distributed._functional_collectives.reduce_scatter_tensor_autograd
//                                                                        -> reduce_scatter_single_autograd
//   torch.distributed._functional_collectives.all_gather_into_tensor_coalesced
//                                                                        -> all_gather_single_coalesced
//   torch.distributed._functional_collectives.reduce_scatter_tensor_coalesced
//                                                                        -> reduce_scatter_single_coalesced
// (the same names reached through torch.distributed.distributed_c10d are the same functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::upgrade {

// How sure a finding is that it is a real use of the removed API. Rename findings are always high:
// the name is resolved through imports. Named-tensor findings on a receiver whose type is unknown
// are medium or low; see docs in each rule's explanation.
enum class Confidence : std::uint8_t { low = 0, medium = 1, high = 2 };
const char* confidence_name(Confidence c);
// "low", "medium", "high" -> the level; nullopt for anything else.
std::optional<Confidence> confidence_from_name(std::string_view name);

struct Rule {
  std::string_view code;         // "UPG101"
  std::string_view name;         // "renamed-all-gather-into-tensor"
  std::string_view summary;      // one line
  std::string_view explanation;  // what, why, how to fix, and the heuristic's limits
  bool fixable;
};

const std::vector<Rule>& all_rules();
const Rule* find_rule(std::string_view code);

// A byte-range replacement in the original file.
struct Edit {
  std::uint32_t begin = 0, end = 0;
  std::string replacement;
};

struct Finding {
  std::string path;        // as displayed
  int cell = 0;            // notebook code cell, 1-based (0: not a notebook)
  int line = 0, col = 0;   // 1-based; col in characters
  int end_line = 0, end_col = 0;  // exclusive end, 1-based
  std::string code;
  std::string message;
  Confidence confidence = Confidence::high;
  std::optional<Edit> fix;  // present for fixable findings whose edit is at this location
};

// Orders by path, cell, line, column, code: the order every output format uses.
bool finding_less(const Finding& a, const Finding& b);

}  // namespace lmcore::upgrade
