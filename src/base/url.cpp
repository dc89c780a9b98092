// The URL grammar accepted here is documented in lmcore/base/url.h.
#include "lmcore/base/url.h"

#include <cctype>

#include "lmcore/base/error.h"

namespace lmcore::base {

std::string Url::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out = v6 ? fmt::format("{}://[{}]", scheme, host) : fmt::format("{}://{}", scheme, host);
  if (port) out += fmt::format(":{}", *port);
  return out + path;
}

Url parse_url(std::string_view text, std::string_view what) {
  const std::string p = what.empty() ? std::string() : fmt::format("{}: ", what);
  auto bad = [&](std::string_view why) -> Url { fail("{}'{}': {}", p, text, why); };

  Url u;
  const auto sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) return bad("expected scheme://...");
  const std::string_view scheme = text.substr(0, sep);
  if (!std::isalpha(static_cast<unsigned char>(scheme[0]))) return bad("the scheme must start with a letter");
  for (char c : scheme) {
    const auto uc = static_cast<unsigned char>(c);
    if (!std::isalnum(uc) && c != '+' && c != '-' && c != '.') return bad("the scheme has a character outside [a-z0-9+.-]");
    u.scheme.push_back(static_cast<char>(std::tolower(uc)));
  }
  const std::string_view rest = text.substr(sep + 3);
  const auto slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  for (char c : authority) {
    if (c == '@') return bad("user information (user@host) is not supported");
    if (c == '?' || c == '#') return bad("a query or fragment ('?', '#') is not supported");
    if (static_cast<unsigned char>(c) <= ' ') return bad("whitespace or a control character in the host");
  }
  if (slash != std::string_view::npos) u.path = std::string(rest.substr(slash));
  for (char c : u.path) {
    if (static_cast<unsigned char>(c) < ' ') return bad("a control character in the path");
  }

  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 host opened with '[' is not closed with ']'");
    u.host = std::string(authority.substr(1, close - 1));
    if (u.host.empty()) return bad("empty IPv6 host '[]'");
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("expected ':port' after the bracketed host");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      if (authority.find(':', colon + 1) != std::string_view::npos)
        return bad("more than one ':' in the host (write an IPv6 address in brackets: [::1]:port)");
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
  }
  if (has_port) {
    if (port_text.empty()) return bad("empty port after ':'");
    long port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535) return bad(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) return bad(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
    u.port = static_cast<int>(port);
  }
  return u;
}

}  // namespace lmcore::base
