// The weights-only unpickler: the data it builds, and the hostile pickles it refuses (globals that
// run code, forbidden opcodes, deep nesting, cycles, truncation).
#include "src/io/pickle.h"
#include "tests/io/io_test_util.h"

namespace lmcore::io::detail {
namespace {

using namespace std::string_literals;

using lmcore::io::testing::as_bytes;

std::string unpickle_error(const std::string& bytes, int max_depth = 200) {
  return lmcore::io::testing::error_of([&] {
    Unpickler u(as_bytes(bytes), "p.pkl", nullptr, max_depth);
    (void)u.load();
  });
}

TEST(Pickle, BuildsPlainData) {
  // {'a': [1, -2, 3.5, True, None], 'b': (u'x',), 'c': 2**40}, protocol 2.
  std::string p = "\x80\x02}q\x00(X\x01\x00\x00\x00"s "a]q\x01(K\x01J\xfe\xff\xff\xff";
  p += "G\x40\x0c\x00\x00\x00\x00\x00\x00\x88Ne"s;
  p += "X\x01\x00\x00\x00"s "bX\x01\x00\x00\x00x\x85"s;
  p += "X\x01\x00\x00\x00"s "c\x8a\x06\x00\x00\x00\x00\x00\x01u."s;
  Unpickler u(as_bytes(p), "p", nullptr);
  const PValue& d = u.at(u.load());
  ASSERT_EQ(d.kind, PKind::dict);
  ASSERT_EQ(d.items.size(), 6u);
  const PValue& list = u.at(d.items[1]);
  ASSERT_EQ(list.kind, PKind::list);
  ASSERT_EQ(list.items.size(), 5u);
  EXPECT_EQ(u.at(list.items[0]).i, 1);
  EXPECT_EQ(u.at(list.items[1]).i, -2);
  EXPECT_EQ(u.at(list.items[2]).f, 3.5);
  EXPECT_EQ(u.at(list.items[3]).kind, PKind::boolean);
  EXPECT_EQ(u.at(list.items[4]).kind, PKind::none);
  EXPECT_EQ(u.at(u.at(d.items[3]).items[0]).s, "x");
  EXPECT_EQ(u.at(d.items[5]).i, 1ll << 40);
}

TEST(Pickle, MemoSharesValues) {
  // l = []; [l, l] through BINPUT/BINGET.
  const std::string p = "\x80\x02](]q\x01h\x01" "e.";
  Unpickler u(as_bytes(p), "p", nullptr);
  const PValue& outer = u.at(u.load());
  ASSERT_EQ(outer.items.size(), 2u);
  EXPECT_EQ(outer.items[0], outer.items[1]);
}

TEST(PickleHostile, GlobalOsSystemIsRefused) {
  const std::string p = "\x80\x02" "cos\nsystem\nX\x07\x00\x00\x00rm -rf /\x85R."s;
  EXPECT_NE(unpickle_error(p).find("'os.system'"), std::string::npos) << unpickle_error(p);
  EXPECT_NE(unpickle_error(p).find("weights-only"), std::string::npos);
}

TEST(PickleHostile, ReduceOnBuiltinsIsRefused) {
  for (const char* g : {"builtins\neval\n", "__builtin__\nexec\n", "posix\nsystem\n", "subprocess\nPopen\n",
                        "torch\nload\n", "collections\ndefaultdict\n"}) {
    const std::string p = std::string("\x80\x02" "c") + g + "X\x01\x00\x00\x00"s "1\x85R.";
    std::string name(g);
    name[name.find('\n')] = '.';
    name.pop_back();
    EXPECT_NE(unpickle_error(p).find("'" + name + "'"), std::string::npos) << unpickle_error(p);
  }
}

TEST(PickleHostile, StackGlobalUsesTheSameAllowList) {
  const std::string p = "\x80\x04\x8c\x08" "builtins\x8c\x04" "eval\x93.";
  EXPECT_NE(unpickle_error(p).find("'builtins.eval'"), std::string::npos);
}

TEST(PickleHostile, ReduceOnAnAllowedNonCallable) {
  const std::string p = "\x80\x02" "ctorch\nfloat32\n)R.";
  EXPECT_NE(unpickle_error(p).find("REDUCE on 'torch.float32' is not supported"), std::string::npos)
      << unpickle_error(p);
}

TEST(PickleHostile, ForbiddenOpcodes) {
  // INST, OBJ, EXT1, PERSID (text), STRING (text protocol), DUP.
  EXPECT_NE(unpickle_error("\x80\x02(iposix\nsystem\n.").find("opcode 0x69 ('i')"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02(o.").find("opcode 0x6f"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02\x82\x01.").find("opcode 0x82"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02P0\n.").find("opcode 0x50"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02S'x'\n.").find("opcode 0x53"), std::string::npos);
}

TEST(PickleHostile, NewobjOnlyForParameter) {
  const std::string p = "\x80\x02" "ccollections\nOrderedDict\n)\x81.";
  EXPECT_NE(unpickle_error(p).find("only torch.nn.parameter.Parameter"), std::string::npos) << unpickle_error(p);
}

TEST(PickleHostile, BuildOnlyOnTensorsAndDicts) {
  const std::string p = "\x80\x02]}b.";
  EXPECT_NE(unpickle_error(p).find("BUILD"), std::string::npos);
}

TEST(PickleHostile, DeepNestingIsRefused) {
  // 100000 nested lists: [[[[...]]]] built with EMPTY_LIST and APPEND from the inside out.
  std::string p = "\x80\x02";
  const int depth = 100000;
  for (int i = 0; i < depth; ++i) p += "]";
  for (int i = 0; i < depth - 1; ++i) p += "a";
  p += ".";
  EXPECT_NE(unpickle_error(p).find("deeper than 200 levels"), std::string::npos);
  // Tuples too.
  std::string t = "\x80\x02N";
  for (int i = 0; i < 1000; ++i) t += "\x85";
  t += ".";
  EXPECT_NE(unpickle_error(t, 50).find("deeper than 50 levels"), std::string::npos);
}

TEST(PickleHostile, StackUnderflowAndMissingMark) {
  EXPECT_NE(unpickle_error("\x80\x02" "a.").find("underflow"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02]K\x01" "e.").find("needs a MARK"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02" "h\x05.").find("memo lookup of 5"), std::string::npos);
  EXPECT_NE(unpickle_error("\x80\x02" "K\x01K\x02.").find("leaves 1 values"), std::string::npos);
}

TEST(PickleHostile, TruncationAtEveryByte) {
  std::string p = "\x80\x02}q\x00(X\x01\x00\x00\x00"s "a]q\x01(K\x01J\xfe\xff\xff\xff";
  p += "G\x40\x0c\x00\x00\x00\x00\x00\x00\x88Ne"s;
  p += "X\x01\x00\x00\x00"s "bX\x01\x00\x00\x00x\x85u."s;
  for (std::size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(unpickle_error(p.substr(0, n)).empty()) << n;
}

TEST(PickleHostile, HugeStringLengthDoesNotAllocate) {
  const std::string p = "\x80\x02X\xff\xff\xff\x7f";
  EXPECT_NE(unpickle_error(p).find("truncated"), std::string::npos);
  const std::string p8 = "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f";
  EXPECT_NE(unpickle_error(p8).find("truncated"), std::string::npos);
}

TEST(PickleHostile, BadUtf8String) {
  const std::string p = "\x80\x02X\x02\x00\x00\x00\xc3\x28."s;
  EXPECT_NE(unpickle_error(p).find("not valid UTF-8"), std::string::npos);
}

}  // namespace
}  // namespace lmcore::io::detail
