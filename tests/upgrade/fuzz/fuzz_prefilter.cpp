// libFuzzer target: the prefilter never rules out a source that gives a UPG1xx/UPG2xx finding
// (may_have_python_findings is a conservative test; see src/upgrade/prefilter.cpp). Seeds:
// tests/upgrade/fuzz/corpus/fuzz_prefilter/ (small files with findings of every kind).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "lmcore/upgrade/python_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  if (lmcore::upgrade::may_have_python_findings(src)) return 0;
  for (const auto& f : lmcore::upgrade::check_python_source(src, {})) {
    if (f.code.rfind("UPG1", 0) == 0 || f.code.rfind("UPG2", 0) == 0) {
      std::fprintf(stderr, "prefilter ruled out a source with %s at %d:%d: %s\n", f.code.c_str(), f.line, f.col,
                   f.message.c_str());
      std::abort();
    }
  }
  return 0;
}
