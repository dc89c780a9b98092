// lmcore/base/url.h — the one parser for the URLs lmcore accepts (store addresses today):
//
//   scheme://host[:port][/path]      redis://10.0.0.5:6379, redis://[fe80::1]:6379/
//   scheme:///absolute/path          file:///shared/rendezvous  (empty host)
//
//   base::Url u = base::parse_url(text, "open_store");   // throws lmcore::Error naming the URL
//   int port = u.port.value_or(6379);
//
// Rules: the scheme is letters, digits, '+', '-', '.' starting with a letter, and is lower-cased; an
// IPv6 host is written in brackets (returned without them); a port is 1..65535 written in decimal
// digits only ("6379x", "-1" and "" after a colon are errors); the path is everything from the first
// '/' after the authority and is kept verbatim (spaces included; control characters are refused). No
// user-info, query or fragment in the authority: an '@', '?' or '#' there is an error rather than
// being misread as part of the host.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lmcore::base {

struct Url {
  std::string scheme;       // "redis"
  std::string host;         // "10.0.0.5", "fe80::1" (no brackets), "" for file:///...
  std::optional<int> port;  // absent when the URL names none
  std::string path;         // "/shared/rendezvous", "" or "/"

  // Canonical text: scheme://host[:port]path, with brackets around an IPv6 host.
  std::string str() const;
};

// Parses `text`; errors read "<what>: '<text>': <what is wrong>".
Url parse_url(std::string_view text, std::string_view what);

}  // namespace lmcore::base
