// Python bindings of the tokenizer: lmcore.Tokenizer (from_file, encode, decode, encode_batch, train).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fmt/format.h>

#include "lmcore/text/tokenizer.h"
#include "lmcore/text/train.h"

namespace py = pybind11;

namespace lmcore::python {

namespace {

// The message of the Python exception being raised, which is cleared.
std::string take_python_error() {
  py::error_already_set e;
  return e.what();
}

// str (as UTF-8) or bytes (as they are).
std::string text_bytes(const py::handle& h, const char* what) {
  if (py::isinstance<py::bytes>(h)) return h.cast<std::string>();
  if (py::isinstance<py::str>(h)) {
    // A str holding a lone surrogate has no UTF-8 form; pybind11's own cast says only "Unable to cast".
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
    if (utf8 == nullptr)
      throw py::value_error(std::string(what) + ": the text has no UTF-8 form (" + take_python_error() + ")");
    return std::string(utf8, static_cast<std::size_t>(size));
  }
  throw py::type_error(std::string(what) + ": expected str or bytes, found " +
                       py::str(py::type::of(h)).cast<std::string>());
}

// Token ids from any iterable of integers (int, NumPy integers: whatever has __index__).
std::vector<std::uint32_t> ids_of(const py::iterable& ids, const char* what) {
  std::vector<std::uint32_t> out;
  for (const py::handle& h : ids) {
    const py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
    if (!index) {
      PyErr_Clear();
      throw py::type_error(fmt::format("{}: ids must be integers, found {} at position {}", what,
                                       py::str(py::type::of(h)).cast<std::string>(), out.size()));
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || v < 0 || v > 0xFFFFFFFFll)
      throw py::value_error(fmt::format("{}: id {} at position {} is out of range", what,
                                        py::str(index).cast<std::string>(), out.size()));
    out.push_back(static_cast<std::uint32_t>(v));
  }
  return out;
}

}  // namespace

void bind_text(py::module_& m) {
  using text::Tokenizer;
  m.def(
      "pretokenize",
      [](const py::object& s, const std::string& pattern) {
        const std::string b = text_bytes(s, "pretokenize");
        const text::SplitPattern p = text::SplitPattern::from_name(pattern);
        std::vector<text::Span> spans;
        {
          py::gil_scoped_release release;
          p.split(b, spans);
        }
        py::list out;
        for (const text::Span& sp : spans) out.append(py::bytes(b.data() + sp.begin, sp.size()));
        return out;
      },
      py::arg("text"), py::arg("pattern") = "gpt2",
      "The pieces (bytes) the byte-level BPE split cuts a str/bytes into; pattern: 'gpt2' or 'llama3'.");
  py::class_<Tokenizer>(m, "Tokenizer",
                        "Byte-level BPE tokenizer (GPT-2, Llama 3 style). Tokenizer.from_file('tokenizer.json'), "
                        "Tokenizer.train(files, vocab_size).")
      .def_static(
          "from_file", [](const std::filesystem::path& p) { return Tokenizer::from_file(p.string()); }, py::arg("path"),
          "Reads a Hugging Face tokenizer.json.")
      .def_static(
          "from_json", [](const std::string& s) { return Tokenizer::from_json(s); }, py::arg("json"),
          "Parses tokenizer.json text.")
      .def_static(
          "from_gpt2_files",
          [](const std::filesystem::path& v, const std::filesystem::path& m) {
            return Tokenizer::from_gpt2_files(v.string(), m.string());
          },
          py::arg("vocab_json"), py::arg("merges_txt"), "Reads GPT-2's vocab.json (encoder.json) and merges.txt (vocab.bpe).")
      .def_static(
          "train",
          [](const std::vector<std::filesystem::path>& paths, std::int64_t vocab_size,
             const std::vector<std::string>& special_tokens, const std::string& pattern, std::int64_t min_frequency, py::object texts, bool progress) {
            std::vector<std::string> files;
            for (const auto& p : paths) files.push_back(p.string());
            text::BpeTrainOptions o;
            o.vocab_size = vocab_size;
            o.special_tokens = special_tokens;
            o.pattern = pattern;
            o.min_frequency = min_frequency;
            o.progress = progress ? stderr : nullptr;
            std::vector<std::string> owned;
            if (!texts.is_none())
              for (const py::handle& h : texts) owned.push_back(text_bytes(h, "train: texts"));
            py::gil_scoped_release release;
            if (texts.is_none()) return text::train_bpe(files, o);
            std::vector<std::string_view> views(owned.begin(), owned.end());
            return text::train_bpe_texts(views, o);
          },
          py::arg("files") = std::vector<std::filesystem::path>{}, py::arg("vocab_size") = 8192,
          py::arg("special_tokens") = std::vector<std::string>{}, py::arg("pattern") = "gpt2",
          py::arg("min_frequency") = 0, py::arg("texts") = py::none(), py::arg("progress") = false,
          "Trains on files (or on `texts`, a list of str/bytes documents). pattern: 'gpt2' or 'llama3'.")
      .def(
          "encode",
          [](const Tokenizer& t, const py::object& s, bool allow_special) {
            const std::string b = text_bytes(s, "encode");
            py::gil_scoped_release release;
            return t.encode(b, {.allow_special = allow_special});
          },
          py::arg("text"), py::arg("allow_special") = false,
          "Token ids of a str (UTF-8) or bytes. Special tokens in the text match only with allow_special.")
      .def(
          "encode_batch",
          [](const Tokenizer& t, const py::iterable& texts, bool allow_special) {
            std::vector<std::string> owned;
            for (const py::handle& h : texts) owned.push_back(text_bytes(h, "encode_batch"));
            py::gil_scoped_release release;
            return t.encode_batch(owned, {.allow_special = allow_special});
          },
          py::arg("texts"), py::arg("allow_special") = false, "Encodes documents in parallel.")
      .def(
          "decode",
          [](const Tokenizer& t, const py::iterable& ids, bool skip_special) {
            const auto v = ids_of(ids, "decode");
            return t.decode(v, skip_special);
          },
          py::arg("ids"), py::arg("skip_special") = false,
          "Text of the ids; invalid UTF-8 becomes U+FFFD as in Hugging Face.")
      .def(
          "decode_bytes",
          [](const Tokenizer& t, const py::iterable& ids, bool skip_special) {
            const auto v = ids_of(ids, "decode_bytes");
            return py::bytes(t.decode_bytes(v, skip_special));
          },
          py::arg("ids"), py::arg("skip_special") = false, "The exact bytes of the ids.")
      .def(
          "save", [](const Tokenizer& t, const std::filesystem::path& p) { t.save(p.string()); }, py::arg("path"),
          "Writes tokenizer.json (atomically).")
      .def("to_json", &Tokenizer::to_json)
      .def(
          "save_gpt2",
          [](const Tokenizer& t, const std::filesystem::path& v, const std::filesystem::path& m) {
            t.save_gpt2(v.string(), m.string());
          },
          py::arg("vocab_json"), py::arg("merges_txt"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("end_of_text_id", &Tokenizer::end_of_text_id)
      .def_property_readonly("num_merges", [](const Tokenizer& t) { return t.merges().size(); })
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", &Tokenizer::id_to_token, py::arg("id"))
      .def("__repr__", [](const Tokenizer& t) {
        return "<lmcore.Tokenizer vocab_size=" + std::to_string(t.vocab_size()) +
               " merges=" + std::to_string(t.merges().size()) + ">";
      });
}

}  // namespace lmcore::python
