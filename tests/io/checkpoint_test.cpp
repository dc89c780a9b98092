// load() across formats: detection from bytes, the PyTorch zip writer/reader pair (sharing, views,
// ZIP64, big-endian), atomic writes, and hostile PyTorch archives. Files made by torch 1.13 itself are
// tested from Python (tests/python/test_io_*.py).
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include <csignal>

#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"
#include "src/io/file_util.h"
#include "src/io/zip_reader.h"
#include "src/io/zip_writer.h"
#include "tests/io/io_test_util.h"

namespace lmcore::io {
namespace {

using namespace std::string_literals;

using testing::as_bytes;
using testing::pattern_tensor;
using testing::tensor_bytes;

// A PyTorch-style archive from a hand-written pickle and storages.
std::string torch_archive(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& extra = {},
                          const std::string& byteorder = "little") {
  testing::TempDir dir;
  const std::string path = dir.file("x.pt");
  {
    detail::AtomicFile out(path);
    detail::ZipWriter w(out);
    w.add("x/data.pkl", pickle.data(), pickle.size());
    w.add("x/byteorder", byteorder.data(), byteorder.size());
    for (const auto& [n, d] : extra) w.add("x/" + n, d.data(), d.size());
    w.add("x/version", "3\n", 2);
    w.finish();
    out.commit();
  }
  return testing::slurp(path);
}

// Pickle of {'w': _rebuild_tensor_v2(storage('0', FloatStorage, numel), offset, size, stride, False, OrderedDict())}.
std::string one_tensor_pickle(int numel, int offset, std::vector<int> size, std::vector<int> stride,
                              const std::string& storage_class = "FloatStorage") {
  std::string p = "\x80\x02}(X\x01\x00\x00\x00w"s;
  p += "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"s;
  p += "ctorch\n" + storage_class + "\nX\x01\x00\x00\x00"s "0X\x03\x00\x00\x00"s "cpuJ";
  p.append(reinterpret_cast<const char*>(&numel), 4);
  p += "tQJ";
  p.append(reinterpret_cast<const char*>(&offset), 4);
  p += "(";
  for (int s : size) p += "J" + std::string(reinterpret_cast<const char*>(&s), 4);
  p += "t(";
  for (int s : stride) p += "J" + std::string(reinterpret_cast<const char*>(&s), 4);
  p += "t\x89" "ccollections\nOrderedDict\n)RtRu.";
  return p;
}

std::string torch_load_error(const std::string& bytes) {
  return testing::error_of([&] { (void)load_bytes(as_bytes(bytes), "x.pt"); });
}

TEST(Detect, FormatsFromBytes) {
  auto d = [](const std::string& s) { return detect_format(as_bytes(s)); };
  EXPECT_EQ(d("GGUF\x03\x00\x00\x00"s), Format::gguf);
  EXPECT_EQ(d("\x93NUMPY\x01\x00"s), Format::npy);
  EXPECT_EQ(d(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14)), Format::torch_legacy);
  EXPECT_EQ(d("\x02\x00\x00\x00\x00\x00\x00\x00{}"s), Format::safetensors);
  EXPECT_EQ(d(torch_archive(one_tensor_pickle(1, 0, {1}, {1}))), Format::torch_zip);
  EXPECT_EQ(d("PK\x03\x04"), Format::zip);
  EXPECT_EQ(d("hello world"), Format::unknown);
}

TEST(Detect, NameDoesNotMatter) {
  testing::TempDir dir;
  const std::string path = dir.file("weights.pt");  // really safetensors
  save_safetensors(path, {{"a", Tensor::zeros({2}, DType::f32)}});
  EXPECT_EQ(load(path).format, Format::safetensors);
}

TEST(Detect, UnknownAndUnreadFormatsAreNamed) {
  const std::string gguf = "GGUF\x03\x00\x00\x00\x00\x00\x00\x00"s;
  EXPECT_NE(testing::error_of([&] { (void)load_bytes(as_bytes(gguf), "m.gguf"); }).find("GGUF file"),
            std::string::npos);
  const std::string png = "\x89PNG\r\n\x1a\n0000";
  const std::string msg = testing::error_of([&] { (void)load_bytes(as_bytes(png), "x.bin"); });
  EXPECT_NE(msg.find("unknown checkpoint format"), std::string::npos) << msg;
  EXPECT_NE(msg.find("89 50 4e 47 0d 0a 1a 0a"), std::string::npos) << msg;
  EXPECT_NE(testing::error_of([&] { (void)load_bytes({}, "empty"); }).find("empty file"), std::string::npos);
  testing::TempDir dir;
  EXPECT_NE(testing::error_of([&] { (void)load(dir.file("missing.pt")); }).find("cannot open"), std::string::npos);
}

TEST(Detect, AFileThatReportsSizeZeroButHasContentsIsNotCalledEmpty) {
  const std::string msg = testing::error_of([&] { (void)load("/proc/self/status"); });
  EXPECT_NE(msg.find("'/proc/self/status' reports a size of 0 bytes but has contents"), std::string::npos) << msg;
  testing::TempDir dir;
  const std::string empty = dir.file("empty.safetensors");
  { std::ofstream(empty, std::ios::binary); }
  const std::string msg_empty = testing::error_of([&] { (void)load(empty); });
  EXPECT_NE(msg_empty.find("empty file"), std::string::npos) << msg_empty;
}

TEST(TorchZip, RoundTripSharesStoragesAndKeepsViews) {
  testing::TempDir dir;
  const Tensor base = pattern_tensor({6, 8}, DType::f32, 1);
  const Tensor wte = pattern_tensor({10, 4}, DType::bf16, 2);
  NamedTensors in = {{"base", base},
                     {"row", base.select(0, 2)},
                     {"cols", base.slice(1, 1, 7, 2)},
                     {"t", base.transpose(0, 1)},
                     {"wte", wte},
                     {"lm_head", wte},  // tied
                     {"scalar", pattern_tensor({}, DType::i64, 3)},
                     {"empty", Tensor::empty({0, 3}, DType::f16)},
                     {"flags", pattern_tensor({5}, DType::boolean, 4)}};
  const std::string path = dir.file("m.pt");
  save_torch(path, in);
  const LoadResult r = load(path);
  EXPECT_EQ(r.format, Format::torch_zip);
  ASSERT_EQ(r.tensors.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Entry& e = r.tensors.entries()[i];
    EXPECT_EQ(e.name, in[i].first);
    EXPECT_EQ(e.tensor.dtype(), in[i].second.dtype()) << e.name;
    EXPECT_EQ(e.tensor.shape(), in[i].second.shape()) << e.name;
    EXPECT_EQ(tensor_bytes(e.tensor), tensor_bytes(in[i].second)) << e.name;
  }
  const Tensor& b = r.tensors.at("base");
  EXPECT_FALSE(b.storage()->owned());  // mapped zero-copy
  EXPECT_EQ(r.tensors.at("t").storage(), b.storage());
  EXPECT_EQ(r.tensors.at("t").strides(), (Shape{1, 8}));
  EXPECT_EQ(r.tensors.at("cols").strides(), (Shape{8, 2}));
  EXPECT_EQ(r.tensors.at("row").storage_offset(), 16);
  EXPECT_EQ(r.tensors.at("lm_head").data_ptr(), r.tensors.at("wte").data_ptr());
  EXPECT_GE(r.tensors.find("base")->file_offset, 0);
}

TEST(TorchZip, WritesOnlyTheRangeViewsUse) {
  testing::TempDir dir;
  const Tensor big = pattern_tensor({1000, 100}, DType::f32, 9);
  const std::string path = dir.file("s.pt");
  save_torch(path, {{"rows", big.narrow(0, 500, 2)}});
  EXPECT_LT(testing::slurp(path).size(), 2000u);
  const LoadResult r = load(path);
  EXPECT_EQ(tensor_bytes(r.tensors.at("rows")), tensor_bytes(big.narrow(0, 500, 2)));
}

TEST(TorchZip, Zip64ArchivesLoad) {
  testing::TempDir dir;
  const Tensor t = pattern_tensor({33}, DType::i32, 5);
  const std::string path = dir.file("z64.pt");
  SaveTorchOptions o;
  o.force_zip64 = true;
  save_torch(path, {{"t", t}}, o);
  EXPECT_EQ(tensor_bytes(load(path).tensors.at("t")), tensor_bytes(t));
}

TEST(TorchZip, VerifyCrcCatchesDamagedTensorDataOnlyWhenAsked) {
  const std::string good = torch_archive(one_tensor_pickle(3, 0, {3}, {1}), {{"data/0", std::string(12, '\x11')}});
  std::string bad = good;
  bad[good.find(std::string(12, '\x11')) + 5] ^= 0x40;  // one flipped bit in the stored tensor data
  LoadOptions verify;
  verify.verify_crc = true;
  EXPECT_NO_THROW((void)load_bytes(as_bytes(good), "good.pt", verify));
  // Default: zero-copy, the data is not read, so the damage passes through.
  EXPECT_NE(tensor_bytes(load_bytes(as_bytes(bad), "bad.pt").tensors.at("w")), std::string(12, '\x11'));
  const std::string e = testing::error_of([&] { (void)load_bytes(as_bytes(bad), "bad.pt", verify); });
  EXPECT_NE(e.find("bad.pt: entry 'x/data/0': CRC-32"), std::string::npos) << e;
  // The same through the copying path (a big-endian archive is copied to be swapped).
  const std::string good_be =
      torch_archive(one_tensor_pickle(3, 0, {3}, {1}), {{"data/0", std::string(12, '\x11')}}, "big");
  std::string bad_be = good_be;
  bad_be[good_be.find(std::string(12, '\x11')) + 5] ^= 0x40;
  EXPECT_NO_THROW((void)load_bytes(as_bytes(bad_be), "be.pt"));
  EXPECT_NE(testing::error_of([&] { (void)load_bytes(as_bytes(bad_be), "be.pt", verify); }).find("CRC-32"),
            std::string::npos);
  // A damaged stored pickle.
  std::string bad_pickle = good;
  bad_pickle[good.find("_rebuild_tensor_v2")] = 'X';  // still a valid global name, different bytes
  const std::string ep = testing::error_of([&] { (void)load_bytes(as_bytes(bad_pickle), "p.pt", verify); });
  EXPECT_NE(ep.find("entry 'x/data.pkl': CRC-32"), std::string::npos) << ep;
}

TEST(TorchZip, BigEndianArchivesAreSwapped) {
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::string be;
  for (float v : values) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    u = __builtin_bswap32(u);
    be.append(reinterpret_cast<const char*>(&u), 4);
  }
  const std::string file = torch_archive(one_tensor_pickle(3, 0, {3}, {1}), {{"data/0", be}}, "big");
  const LoadResult r = load_bytes(as_bytes(file), "be.pt");
  EXPECT_EQ(r.tensors.at("w").to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(TorchZip, KeepStructureAndMetadata) {
  // {'model': {'w': tensor}, 'epoch': 7}
  std::string p = "\x80\x02}(X\x05\x00\x00\x00model"s;
  p += one_tensor_pickle(2, 0, {2}, {1}).substr(2);  // the inner dict, without PROTO
  p.pop_back();                                      // without its STOP
  p += "X\x05\x00\x00\x00"s "epochK\x07u.";
  const std::string file = torch_archive(p, {{"data/0", std::string(8, '\0')}});
  LoadOptions o;
  o.keep_structure = true;
  const LoadResult r = load_bytes(as_bytes(file), "n.pt", o);
  EXPECT_TRUE(r.tensors.contains("model.w"));
  EXPECT_EQ(r.metadata.at("epoch"), "7");
  ASSERT_EQ(r.tree.kind, Node::Kind::dict);
  EXPECT_EQ(r.tree.keys[0], "model");
  EXPECT_EQ(r.tree.children[0].keys[0], "w");
  EXPECT_EQ(r.tree.children[0].children[0].kind, Node::Kind::tensor);
  EXPECT_EQ(r.tree.children[1].text, "7");
}

TEST(TorchZipHostile, MaliciousPickleInsideArchive) {
  const std::string p = "\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00id\x85R."s;
  EXPECT_NE(torch_load_error(torch_archive(p)).find("'os.system'"), std::string::npos) << torch_load_error(torch_archive(p));
}

TEST(TorchZipHostile, StorageSizeDisagreesWithRecord) {
  const std::string file = torch_archive(one_tensor_pickle(4, 0, {4}, {1}), {{"data/0", std::string(12, '\0')}});
  EXPECT_NE(torch_load_error(file).find("storage '0' holds 12 bytes, expected 16"), std::string::npos) << torch_load_error(file);
}

TEST(TorchZipHostile, TensorOutsideItsStorage) {
  const std::string file = torch_archive(one_tensor_pickle(4, 2, {2, 2}, {2, 1}), {{"data/0", std::string(16, '\0')}});
  EXPECT_NE(torch_load_error(file).find("reaches element 5 of a storage of 4 elements"), std::string::npos) << torch_load_error(file);
  // Overflowing extents.
  const std::string f2 =
      torch_archive(one_tensor_pickle(4, 0, {2, 2}, {0x7fffffff, 0x7fffffff}), {{"data/0", std::string(16, '\0')}});
  EXPECT_NE(torch_load_error(f2).find("storage of 4 elements"), std::string::npos) << torch_load_error(f2);
}

TEST(TorchZipHostile, MissingStorageRecord) {
  const std::string file = torch_archive(one_tensor_pickle(4, 0, {4}, {1}));
  EXPECT_NE(torch_load_error(file).find("storage '0' has no record 'x/data/0'"), std::string::npos) << torch_load_error(file);
}

TEST(TorchZipHostile, UnsupportedStorageType) {
  const std::string file =
      torch_archive(one_tensor_pickle(4, 0, {4}, {1}, "ComplexFloatStorage"), {{"data/0", std::string(32, '\0')}});
  EXPECT_NE(torch_load_error(file).find("'torch.ComplexFloatStorage' is not supported"), std::string::npos) << torch_load_error(file);
  const std::string evil = torch_archive(one_tensor_pickle(4, 0, {4}, {1}, "EvilStorage"));
  EXPECT_NE(torch_load_error(evil).find("'torch.EvilStorage'"), std::string::npos) << torch_load_error(evil);
}

TEST(TorchZipHostile, SelfReferenceIsRefused) {
  // d = {}; d['d'] = d  (memo) -> the walk sees unbounded depth.
  const std::string p = "\x80\x02}q\x00X\x01\x00\x00\x00"s "dh\x00s."s;
  EXPECT_NE(torch_load_error(torch_archive(p)).find("nests deeper than"), std::string::npos) << torch_load_error(torch_archive(p));
}

TEST(TorchZipHostile, ExponentialSharingIsRefused) {
  // l0 = [None]; l(k+1) = [lk, lk] x 40 levels: 2^40 leaves through memo sharing.
  std::string p = "\x80\x02]q\x00N"s "a";
  for (int k = 0; k < 40; ++k) {
    p += "](h" + std::string(1, static_cast<char>(k)) + "h" + std::string(1, static_cast<char>(k)) + "eq" +
         std::string(1, static_cast<char>(k + 1));
  }
  p += ".";
  // Each level above leaves the previous lists on the stack; wrap them so STOP sees one value.
  std::string wrapped = "\x80\x02(" + p.substr(2, p.size() - 3) + "t.";
  EXPECT_NE(torch_load_error(torch_archive(wrapped)).find("too many values"), std::string::npos)
      << torch_load_error(torch_archive(wrapped));
}

TEST(TorchZipHostile, ZipBombWithinDeflateRatioIsRefused) {
  // 100 MB of zeros deflate to ~100 KB: within deflate's ratio, beyond 64x the archive.
  const std::string zeros(100u << 20, '\0');
  z_stream z{};
  ASSERT_EQ(deflateInit2(&z, 1, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string comp(deflateBound(&z, zeros.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
  z.avail_in = static_cast<uInt>(zeros.size());
  z.next_out = reinterpret_cast<Bytef*>(comp.data());
  z.avail_out = static_cast<uInt>(comp.size());
  ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  comp.resize(z.total_out);
  deflateEnd(&z);
  // Turn a stored archive with a same-sized storage into one whose storage is that deflate stream.
  std::string file = torch_archive(one_tensor_pickle(static_cast<int>(zeros.size() / 4), 0, {1}, {1}),
                                   {{"data/0", comp}});
  const std::uint32_t crc = detail::crc32_of(as_bytes(zeros));
  for (std::size_t at = 0; (at = file.find("x/data/0", at)) != std::string::npos; at += 8) {
    const bool central = file.compare(at - 46, 4, "PK\x01\x02") == 0;
    const std::size_t h = central ? at - 46 : at - 30;
    const std::size_t shift = central ? 2 : 0;  // central records have "version made by" first
    file[h + 8 + shift] = 8;                    // method: deflate
    std::memcpy(file.data() + h + 14 + shift, &crc, 4);
    const std::uint32_t n = static_cast<std::uint32_t>(zeros.size());
    std::memcpy(file.data() + h + 22 + shift, &n, 4);
  }
  EXPECT_NE(torch_load_error(file).find("zip bomb"), std::string::npos) << torch_load_error(file);
}

TEST(AtomicWrite, AbandonedWriteLeavesTheOldFile) {
  testing::TempDir dir;
  const std::string path = dir.file("keep.safetensors");
  testing::spit(path, "old contents");
  {
    detail::AtomicFile f(path);
    f.write("new contents that never get committed");
    // destroyed without commit(): as if the process died mid-write
  }
  EXPECT_EQ(testing::slurp(path), "old contents");
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // the temporary file is gone
  save_safetensors(path, {{"a", Tensor::zeros({1}, DType::u8)}});
  EXPECT_EQ(load(path).tensors.size(), 1u);
}

// Issue 13, defect 3: load() of a FIFO blocked forever in open(). Anything but a regular file is
// refused before reading, without blocking (checked in a child, so a regression shows as a timeout).
TEST(LoadSpecialFiles, FifoIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  const std::string fifo = dir.file("weights.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const bool mmap : {true, false}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      LoadOptions o;
      o.mmap = mmap;
      const std::string msg = testing::error_of([&] { (void)load(fifo, o); });
      ::_exit(msg == "load: '" + fifo + "' is a FIFO, not a regular file" ? 0 : 2);
    }
    int status = 0;
    bool done = false;
    for (int i = 0; i < 1000 && !done; ++i) {
      done = ::waitpid(pid, &status, WNOHANG) == pid;
      if (!done) ::usleep(10000);
    }
    if (!done) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    EXPECT_TRUE(done) << "load() blocked on a FIFO (mmap " << mmap << ")";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(testing::error_of([&] { (void)load(dir.path()); }), "load: '" + dir.path() + "' is a directory, not a regular file");
  EXPECT_EQ(testing::error_of([&] { (void)load("/dev/zero"); }), "load: '/dev/zero' is a character device, not a regular file");
}

}  // namespace
}  // namespace lmcore::io
