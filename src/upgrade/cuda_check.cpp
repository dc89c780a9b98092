// CUDA version checks of upgrade-check: the installed toolkit and runtime, and pins to CUDA < 13 in
// requirement files, conda environments, Dockerfiles, shell scripts and CI configs.
#include "lmcore/upgrade/cuda_check.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace lmcore::upgrade {

namespace fs = std::filesystem;

namespace {

bool parse_major_minor(const std::string& v, int& major, int& minor) {
  major = minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) >= 1) return major > 0;
  return false;
}

std::string read_small_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string real(const fs::path& p) {
  std::error_code ec;
  auto r = fs::canonical(p, ec);
  return ec ? p.string() : r.string();
}

void probe_nvcc(const fs::path& nvcc, std::vector<CudaComponent>& out) {
  std::error_code ec;
  if (!fs::is_regular_file(nvcc, ec)) return;
  // The path is quoted for the shell; paths with a quote in them are skipped rather than escaped.
  const std::string p = nvcc.string();
  if (p.find('\'') != std::string::npos) return;
  FILE* f = popen(fmt::format("'{}' --version 2>/dev/null", p).c_str(), "r");
  if (!f) return;
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) text += buf;
  pclose(f);
  // "Cuda compilation tools, release 13.0, V13.0.88"
  std::smatch m;
  static const std::regex full(R"(release\s+(\d+)\.(\d+),\s*V([\d.]+))");
  static const std::regex short_re(R"(release\s+(\d+)\.(\d+))");
  CudaComponent c{"toolkit", "nvcc --version", p, "", 0, 0};
  if (std::regex_search(text, m, full)) {
    c.version = m[3];
  } else if (std::regex_search(text, m, short_re)) {
    c.version = fmt::format("{}.{}", m[1].str(), m[2].str());
  } else {
    return;
  }
  parse_major_minor(c.version, c.major, c.minor);
  out.push_back(c);
}

void probe_version_json(const fs::path& vj, std::vector<CudaComponent>& out) {
  std::error_code ec;
  if (!fs::is_regular_file(vj, ec)) return;
  try {
    const auto j = nlohmann::json::parse(read_small_file(vj));
    if (!j.contains("cuda") || !j["cuda"].contains("version")) return;
    CudaComponent c{"toolkit", "version.json", vj.string(), j["cuda"]["version"].get<std::string>(), 0, 0};
    parse_major_minor(c.version, c.major, c.minor);
    out.push_back(c);
  } catch (const std::exception&) {
    // Not a CUDA version.json; nothing to report.
  }
}

void probe_cudart(const fs::path& lib, std::vector<CudaComponent>& out) {
  CudaComponent c{"runtime", "", lib.string(), "", 0, 0};
  // cudaRuntimeGetVersion needs no GPU and no driver: it returns the version the library was built as.
  if (void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    using Fn = int (*)(int*);
    if (auto fn = reinterpret_cast<Fn>(dlsym(h, "cudaRuntimeGetVersion"))) {
      int v = 0;
      if (fn(&v) == 0 && v > 0) {
        c.major = v / 1000;
        c.minor = (v % 1000) / 10;
        c.version = fmt::format("{}.{}", c.major, c.minor);
        c.source = "cudaRuntimeGetVersion";
      }
    }
    dlclose(h);
  }
  if (c.version.empty()) {
    // libcudart.so.12.4.127 -> 12.4.127; libcudart.so.12 -> 12
    const std::string name = lib.filename().string();
    const std::size_t k = name.find(".so.");
    if (k == std::string::npos) return;
    c.version = name.substr(k + 4);
    c.source = "file name";
    if (!parse_major_minor(c.version, c.major, c.minor)) return;
  }
  out.push_back(c);
}

void cudart_in(const fs::path& dir, std::vector<fs::path>& libs) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("libcudart.so", 0) == 0) libs.push_back(e.path());
  }
}

}  // namespace

std::vector<CudaComponent> probe_cuda(const std::vector<fs::path>& roots) {
  std::vector<fs::path> nvccs, jsons, dirs, libs;
  std::vector<fs::path> cuda_roots = roots;
  std::error_code ec;
  if (roots.empty()) {
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v) cuda_roots.emplace_back(v);
    if (const char* path = std::getenv("PATH")) {
      std::stringstream ss(path);
      std::string d;
      while (std::getline(ss, d, ':'))
        if (!d.empty()) nvccs.push_back(fs::path(d) / "nvcc");
    }
    for (const auto& e : fs::directory_iterator("/usr/local", ec))
      if (e.path().filename().string().rfind("cuda", 0) == 0) cuda_roots.push_back(e.path());
    for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"})
      dirs.emplace_back(d);
  }
  for (const auto& r : cuda_roots) {
    nvccs.push_back(r / "bin" / "nvcc");
    jsons.push_back(r / "version.json");
    dirs.push_back(r / "lib64");
    dirs.push_back(r / "lib");
    for (const auto& e : fs::directory_iterator(r / "targets", ec)) dirs.push_back(e.path() / "lib");
  }
  std::vector<CudaComponent> out;
  std::set<std::string> seen;
  for (const auto& p : nvccs)
    if (fs::exists(p, ec) && seen.insert(real(p)).second) probe_nvcc(p, out);
  for (const auto& p : jsons)
    if (fs::exists(p, ec) && seen.insert(real(p)).second) probe_version_json(p, out);
  for (const auto& d : dirs) cudart_in(d, libs);
  std::sort(libs.begin(), libs.end());
  for (const auto& p : libs)
    if (seen.insert(real(p)).second) probe_cudart(p, out);
  return out;
}

std::vector<Finding> cuda_component_findings(const std::vector<CudaComponent>& found) {
  std::vector<Finding> out;
  for (const auto& c : found) {
    if (c.major >= 13) continue;
    Finding f;
    f.path = c.path;
    f.line = f.col = f.end_line = 1;
    f.end_col = 2;
    f.code = c.component == "toolkit" ? "UPG301" : "UPG302";
    f.message = fmt::format("CUDA {} {} ({}) is older than 13.0, which PyTorch 2.13 requires", c.component,
                            c.version, c.source);
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<PinFileKind> pin_file_kind(const fs::path& path) {
  std::string name = path.filename().string();
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string ext = path.extension().string();
  if (lower == "dockerfile" || lower.rfind("dockerfile.", 0) == 0 || lower == "containerfile" ||
      (lower.size() > 11 && lower.substr(lower.size() - 11) == ".dockerfile"))
    return PinFileKind::dockerfile;
  if ((ext == ".txt" || ext == ".in") &&
      (lower.find("requirement") != std::string::npos || lower.find("constraint") != std::string::npos))
    return PinFileKind::requirements;
  if (ext == ".pip") return PinFileKind::requirements;
  if (ext == ".yml" || ext == ".yaml") return PinFileKind::conda;
  if (ext == ".sh" || ext == ".bash") return PinFileKind::shell;
  if (lower == "pyproject.toml" || lower == "setup.cfg" || lower == "tox.ini") return PinFileKind::config;
  return std::nullopt;
}

namespace {

// Removes a '#' comment that starts the line or follows whitespace.
std::string_view strip_comment(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i)
    if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) return line.substr(0, i);
  return line;
}

Finding pin_finding(int line, int col, int len, const char* code, std::string msg) {
  Finding f;
  f.line = f.end_line = line;
  f.col = col;
  f.end_col = col + len;
  f.code = code;
  f.message = std::move(msg);
  return f;
}

// "121" -> 12.1, "118" -> 11.8, "92" -> 9.2
void cu_digits(const std::string& d, int& major, int& minor) {
  major = std::stoi(d.substr(0, d.size() - 1));
  minor = d.back() - '0';
}

}  // namespace

std::vector<Finding> check_pin_line(std::string_view raw, int line, int col_offset, PinFileKind kind) {
  std::vector<Finding> out;
  const std::string text(strip_comment(raw));
  if (text.find_first_not_of(" \t\r") == std::string::npos) return out;
  auto col = [&](std::ptrdiff_t byte) { return col_offset + static_cast<int>(byte) + 1; };
  std::smatch m;

  // UPG303: /whl/cu121 index URLs (any /cuNNN path segment) and +cu121 local versions.
  static const std::regex cu(R"((/|\+)cu(\d{2,3})(?![\w.]))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), cu); it != std::sregex_iterator(); ++it) {
    int major, minor;
    cu_digits((*it)[2], major, minor);
    if (major >= 13) continue;
    const bool url = (*it)[1] == "/";
    out.push_back(pin_finding(line, col((*it).position(0) + 1), static_cast<int>((*it).length(0) - 1), "UPG303",
                              fmt::format("{} pins CUDA {}.{} (cu{}); PyTorch 2.13 needs CUDA 13.0 or later (cu130)",
                                          url ? "wheel index URL" : "local version", major, minor,
                                          (*it)[2].str())));
  }
  // UPG304: conda-style CUDA packages with a version below 13 (exact, upper bound, or bare version).
  static const std::regex conda(
      R"(\b(pytorch-cuda|cudatoolkit|cuda-version|cuda-toolkit|cuda-runtime|cuda-nvcc|cuda-cudart)\s*(==|=|<=|<|~=|\s)\s*(\d+)(?:\.(\d+))?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), conda); it != std::sregex_iterator(); ++it) {
    const int major = std::stoi((*it)[3]);
    const int minor = (*it)[4].matched ? std::stoi((*it)[4]) : 0;
    const std::string op = (*it)[2];
    const bool below = op == "<" ? (major < 13 || (major == 13 && minor == 0)) : major < 13;
    if (!below) continue;
    out.push_back(pin_finding(line, col((*it).position(0)), static_cast<int>((*it).length(0)), "UPG304",
                              fmt::format("{} pins CUDA below 13.0 ({}); PyTorch 2.13 needs CUDA 13.0 or later",
                                          (*it)[1].str(), (*it).str(0))));
  }
  // UPG306: pip packages built for one CUDA major.
  static const std::regex pkg(R"(\b(nvidia-[a-z0-9-]+-cu(\d+)|cupy-cuda(\d+)x?|(?:jax|jaxlib)\[cuda(\d+)[^\]]*\]))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pkg); it != std::sregex_iterator(); ++it) {
    std::string digits = (*it)[2].matched ? (*it)[2].str() : (*it)[3].matched ? (*it)[3].str() : (*it)[4].str();
    // -cu12, cuda12x, cuda12 -> 12; cupy-cuda117 -> 11
    const int major = std::stoi(digits.size() >= 3 ? digits.substr(0, 2) : digits);
    if (major >= 13) continue;
    out.push_back(pin_finding(line, col((*it).position(0)), static_cast<int>((*it).length(0)), "UPG306",
                              fmt::format("{} is built for CUDA {}; PyTorch 2.13 needs CUDA 13.0 or later",
                                          (*it).str(0), major)));
  }
  if (kind == PinFileKind::dockerfile) {
    // UPG305: base images and CUDA_VERSION build args.
    static const std::regex from(R"(^\s*FROM\s+(?:--platform=\S+\s+)?(\S+))", std::regex::icase);
    if (std::regex_search(text, m, from)) {
      const std::string image = m[1];
      static const std::regex nv(R"((?:^|/)cuda:(\d+)\.(\d+))");
      static const std::regex tagged(R"(:.*cuda-?(\d+)\.(\d+))");
      std::smatch v;
      if (std::regex_search(image, v, nv) || std::regex_search(image, v, tagged)) {
        const int major = std::stoi(v[1]);
        if (major < 13)
          out.push_back(pin_finding(line, col(m.position(1)), static_cast<int>(image.size()), "UPG305",
                                    fmt::format("base image {} has CUDA {}.{}; PyTorch 2.13 needs CUDA 13.0 or later",
                                                image, major, v[2].str())));
      }
    }
    static const std::regex arg(R"(^\s*(ARG|ENV)\s+(CUDA_VERSION|CUDA_VER|CUDA)[=\s]+\"?(\d+)\.(\d+))",
                                std::regex::icase);
    if (std::regex_search(text, m, arg) && std::stoi(m[3]) < 13)
      out.push_back(pin_finding(line, col(m.position(2)), static_cast<int>(m.length(2)), "UPG305",
                                fmt::format("{} {} sets CUDA {}.{}; PyTorch 2.13 needs CUDA 13.0 or later",
                                            m[1].str(), m[2].str(), m[3].str(), m[4].str())));
  }
  return out;
}

std::vector<Finding> check_pin_text(std::string_view text, PinFileKind kind) {
  std::vector<Finding> out;
  int line = 1;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view l = text.substr(pos, eol - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    auto f = check_pin_line(l, line, 0, kind);
    out.insert(out.end(), f.begin(), f.end());
    if (eol == text.size()) break;
    pos = eol + 1;
    ++line;
  }
  return out;
}

}  // namespace lmcore::upgrade
