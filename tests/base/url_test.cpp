#include "lmcore/base/url.h"

#include "tests/base/base_test_util.h"

namespace lmcore::base {
namespace {

using testing::error_of;

TEST(ParseUrl, AcceptsTheDocumentedForms) {
  Url u = parse_url("redis://10.0.0.5:6379", "store");
  EXPECT_EQ(u.scheme, "redis");
  EXPECT_EQ(u.host, "10.0.0.5");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.path, "");
  EXPECT_EQ(u.str(), "redis://10.0.0.5:6379");

  u = parse_url("REDIS://head-node/", "store");
  EXPECT_EQ(u.scheme, "redis");
  EXPECT_EQ(u.host, "head-node");
  EXPECT_FALSE(u.port.has_value());
  EXPECT_EQ(u.path, "/");

  u = parse_url("redis://[fe80::1]:7000/x", "store");
  EXPECT_EQ(u.host, "fe80::1");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.path, "/x");
  EXPECT_EQ(u.str(), "redis://[fe80::1]:7000/x");

  u = parse_url("file:///shared/rdv dir", "store");
  EXPECT_EQ(u.scheme, "file");
  EXPECT_EQ(u.host, "");
  EXPECT_EQ(u.path, "/shared/rdv dir");

  EXPECT_EQ(parse_url("redis://h:1", "").port, 1);
  EXPECT_EQ(parse_url("redis://h:65535", "").port, 65535);
  EXPECT_EQ(parse_url("svn+ssh://h", "").scheme, "svn+ssh");
}

TEST(ParseUrl, RefusesWhatItCannotReadExactly) {
  const std::pair<const char*, const char*> cases[] = {
      {"localhost:6379", "expected scheme://..."},
      {"://h", "expected scheme://..."},
      {"1redis://h", "the scheme must start with a letter"},
      {"re_dis://h", "the scheme has a character outside [a-z0-9+.-]"},
      {"redis://h:", "empty port after ':'"},
      {"redis://h:0", "port '0' is not a number from 1 to 65535"},
      {"redis://h:65536", "port '65536' is not a number from 1 to 65535"},
      {"redis://h:-1", "port '-1' is not a number from 1 to 65535"},
      {"redis://h:63x", "port '63x' is not a number from 1 to 65535"},
      {"redis://h:99999999999999999999", "port '99999999999999999999' is not a number from 1 to 65535"},
      {"redis://h:1:2", "more than one ':' in the host (write an IPv6 address in brackets: [::1]:port)"},
      {"redis://[::1", "an IPv6 host opened with '[' is not closed with ']'"},
      {"redis://[]:1", "empty IPv6 host '[]'"},
      {"redis://[::1]7", "expected ':port' after the bracketed host"},
      {"redis://user@h:1", "user information (user@host) is not supported"},
      {"redis://h:1?db=2", "a query or fragment ('?', '#') is not supported"},
      {"redis://h :1", "whitespace or a control character in the host"},
      {"file:///a\nb", "a control character in the path"},
  };
  for (const auto& c : cases) {  // a structured binding cannot be captured by clang-14's lambdas
    const std::string text = c.first;
    EXPECT_EQ(error_of([&] { parse_url(text, "open_store"); }), fmt::format("open_store: '{}': {}", text, c.second));
  }
}

}  // namespace
}  // namespace lmcore::base
