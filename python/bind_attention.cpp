// Python bindings of flex attention: MaskMod, ScoreMod, BlockMask, create_block_mask, flex_attention
// (+ backward), sdpa (+ backward). Python callables work as masks and score modifiers (slowly: the GIL
// is taken per element); the kernels run with the GIL released.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "lmcore/attention/flex_attention.h"
#include "lmcore/attention/sdpa.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

namespace {

using namespace lmcore::attention;

// A Python callable kept alive by the C++ closure; released with the GIL held.
std::shared_ptr<py::function> hold(py::function fn) {
  return std::shared_ptr<py::function>(new py::function(std::move(fn)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
}

MaskMod mask_from_callable(py::function fn) {
  auto f = hold(std::move(fn));
  return MaskMod::from_function(
      [f](std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) {
        py::gil_scoped_acquire gil;
        return py::bool_((*f)(b, h, q, kv)).cast<bool>();
      },
      "python");
}

ScoreFunction score_from_callable(py::function fn) {
  auto f = hold(std::move(fn));
  return [f](double s, std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) {
    py::gil_scoped_acquire gil;
    return py::float_((*f)(s, b, h, q, kv)).cast<double>();
  };
}

MaskMod to_mask(const py::object& o) {
  if (py::isinstance<MaskMod>(o)) return o.cast<MaskMod>();
  if (PyCallable_Check(o.ptr())) return mask_from_callable(o.cast<py::function>());
  throw Error(fmt::format("expected a lmcore.MaskMod or a callable mask_mod(b, h, q_idx, kv_idx) -> bool, found {}",
                          std::string(py::str(o.get_type()))));
}

ScoreMod to_score_mod(const py::object& o) {
  if (o.is_none()) return ScoreMod();
  if (py::isinstance<ScoreMod>(o)) return o.cast<ScoreMod>();
  if (PyCallable_Check(o.ptr())) return ScoreMod::from_function(score_from_callable(o.cast<py::function>()), {}, "python");
  throw Error(fmt::format("expected a lmcore.ScoreMod or a callable score_mod(score, b, h, q_idx, kv_idx) -> float, "
                          "found {}",
                          std::string(py::str(o.get_type()))));
}

std::vector<std::int64_t> to_ids(const py::object& o) {
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) return o.cast<std::vector<std::int64_t>>();
  return to_tensor(o, "doc_ids").to_vector<std::int64_t>();
}

// Tables as f64 (an f32 array exactly); the f32 kernels round them to f32, the f64 kernels keep them.
std::vector<double> to_doubles(const py::object& o, const char* name) {
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) return o.cast<std::vector<double>>();
  return to_tensor(o, name).to_vector<double>();
}

}  // namespace

void bind_attention(py::module_& m) {
  py::class_<MaskMod>(m, "MaskMod",
                      "Which (q, kv) pairs attend; built-ins classify blocks in closed form. Compose with &, |, ~.")
      .def(py::init<>())
      .def_static("all", &MaskMod::all)
      .def_static("causal", &MaskMod::causal)
      .def_static("sliding_window", &MaskMod::sliding_window, py::arg("window"), "causal and q - kv <= window")
      .def_static("prefix_lm", &MaskMod::prefix_lm, py::arg("prefix_length"))
      .def_static("document", [](const py::object& ids) { return MaskMod::document(to_ids(ids)); }, py::arg("doc_ids"))
      .def_static("chunked", &MaskMod::chunked, py::arg("chunk_size"))
      .def_static("from_function", [](py::function fn) { return mask_from_callable(std::move(fn)); }, py::arg("fn"))
      .def("__and__", [](const MaskMod& a, const py::object& b) { return a & to_mask(b); })
      .def("__or__", [](const MaskMod& a, const py::object& b) { return a | to_mask(b); })
      // callable & MaskMod: Python asks the right operand when the left (a function) has no __and__.
      .def("__rand__", [](const MaskMod& b, const py::object& a) { return to_mask(a) & b; })
      .def("__ror__", [](const MaskMod& b, const py::object& a) { return to_mask(a) | b; })
      .def("__invert__", [](const MaskMod& a) { return !a; })
      .def_static("from_tensor", [](const py::object& t) { return MaskMod::from_tensor(to_tensor(t, "mask")); },
                  py::arg("mask"), "A bool mask broadcastable to [B, H, L, S] (true = attend), kept alive by the MaskMod")
      .def(
          "dense",
          [](const MaskMod& a, std::int64_t B, std::int64_t H, std::int64_t L, std::int64_t S) {
            LMCORE_CHECK(B >= 0 && H >= 0 && L >= 0 && S >= 0, "MaskMod.dense: expected sizes >= 0, found {} {} {} {}",
                         B, H, L, S);
            py::array_t<bool> out({B, H, L, S});
            auto* p = reinterpret_cast<std::uint8_t*>(out.mutable_data());
            {
              py::gil_scoped_release release;
              for (std::int64_t b = 0; b < B; ++b)
                for (std::int64_t h = 0; h < H; ++h)
                  if (L > 0 && S > 0) a.fill(b, h, 0, L, 0, S, p + (b * H + h) * L * S, S);
            }
            return out;
          },
          py::arg("B"), py::arg("H"), py::arg("Q_LEN"), py::arg("KV_LEN"), "bool [B, H, L, S]: allowed(b, h, q, kv)")
      .def("independent_of_batch_and_head", &MaskMod::independent_of_batch_and_head,
           "False when the mask may differ between batches or heads (callables, tensors)")
      .def("allowed", &MaskMod::allowed, py::arg("b"), py::arg("h"), py::arg("q_idx"), py::arg("kv_idx"))
      .def("__repr__", [](const MaskMod& a) { return "MaskMod(" + a.describe() + ")"; });

  py::class_<ScoreMod>(m, "ScoreMod", "A function of each attention score (after scaling), chained with then().")
      .def(py::init<>())
      .def_static("relative_position_bias",
                  [](const py::object& bias, std::int64_t r) { return ScoreMod::relative_position_bias(to_doubles(bias, "bias"), r); },
                  py::arg("bias"), py::arg("max_distance"),
                  "score + bias[h][clamp(q - kv, -R, R) + R], bias flattened from [heads or 1, 2R + 1]")
      .def_static("alibi", [](const py::object& slopes) { return ScoreMod::alibi(to_doubles(slopes, "slopes")); },
                  py::arg("slopes"), "score + slopes[h] * (kv - q)")
      .def_static("alibi_slopes", &ScoreMod::alibi_slopes, py::arg("heads"))
      .def_static("softcap", [](double cap, bool trainable) { return ScoreMod::softcap(cap, trainable); }, py::arg("cap"), py::arg("trainable") = false,
                  "cap * tanh(score / cap); trainable: the cap is a parameter (a gradient of shape [1])")
      .def_static("from_function",
                  [](py::function fn, const py::object& derivative) {
                    ScoreFunction d;
                    if (!derivative.is_none()) d = score_from_callable(derivative.cast<py::function>());
                    return ScoreMod::from_function(score_from_callable(std::move(fn)), d, "python");
                  },
                  py::arg("fn"), py::arg("derivative") = py::none())
      .def("then", &ScoreMod::then, py::arg("next"))
      .def("__repr__", [](const ScoreMod& s) { return "ScoreMod(" + s.describe() + ")"; });

  py::class_<BlockMask>(m, "BlockMask", "Per (batch, head, query block): partial and full key blocks.")
      .def_readonly("batch", &BlockMask::batch)
      .def_readonly("heads", &BlockMask::heads)
      .def_readonly("q_len", &BlockMask::q_len)
      .def_readonly("kv_len", &BlockMask::kv_len)
      .def_readonly("q_block", &BlockMask::q_block)
      .def_readonly("kv_block", &BlockMask::kv_block)
      .def_readonly("num_q_blocks", &BlockMask::num_q_blocks)
      .def_readonly("num_kv_blocks", &BlockMask::num_kv_blocks)
      .def_readonly("built_batch", &BlockMask::built_batch)
      .def_readonly("built_heads", &BlockMask::built_heads)
      .def(
          "block_kinds",
          [](const BlockMask& b) {
            std::vector<std::uint8_t> kinds = block_kinds(b);
            py::array_t<std::uint8_t> out({b.batch, b.heads, b.num_q_blocks, b.num_kv_blocks});
            std::copy(kinds.begin(), kinds.end(), out.mutable_data());
            return out;
          },
          "uint8 [batch, heads, num_q_blocks, num_kv_blocks]: 0 empty, 1 partial, 2 full (batch/heads 1 when broadcast)")
      .def("nonempty_blocks", &BlockMask::nonempty_blocks)
      .def("partial_blocks", [](const BlockMask& b) { return b.partial.total_blocks(); })
      .def("full_blocks", [](const BlockMask& b) { return b.full.total_blocks(); })
      .def("block_density", &BlockMask::block_density)
      .def("element_density", &BlockMask::element_density, py::call_guard<py::gil_scoped_release>())
      .def("nbytes", &BlockMask::bytes)
      .def("__repr__", &BlockMask::describe);

  m.def(
      "create_block_mask",
      [](const py::object& mask_mod, std::int64_t B, std::int64_t H, std::int64_t L, std::int64_t S,
         std::int64_t q_block, std::int64_t kv_block) {
        const MaskMod mm = to_mask(mask_mod);
        py::gil_scoped_release release;
        return create_block_mask(mm, B, H, L, S, q_block, kv_block);
      },
      py::arg("mask_mod"), py::arg("B"), py::arg("H"), py::arg("Q_LEN"), py::arg("KV_LEN"), py::arg("q_block") = 128,
      py::arg("kv_block") = 128,
      "Block mask of a MaskMod or callable mask_mod(b, h, q_idx, kv_idx); B or H of 1 broadcast.");

  m.def(
      "block_mask_from_kinds",
      [](const py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>& kinds, const py::object& mask_mod,
         std::int64_t L, std::int64_t S, std::int64_t q_block, std::int64_t kv_block) {
        LMCORE_CHECK(kinds.ndim() == 4, "block_mask_from_kinds: 'kinds' must be [B, H, num_q_blocks, num_kv_blocks], "
                     "found {} dimensions", kinds.ndim());
        const MaskMod mm = to_mask(mask_mod);
        std::vector<std::uint8_t> k(kinds.data(), kinds.data() + kinds.size());
        const std::int64_t nq = (L + q_block - 1) / std::max<std::int64_t>(q_block, 1);
        const std::int64_t nk = (S + kv_block - 1) / std::max<std::int64_t>(kv_block, 1);
        LMCORE_CHECK(kinds.shape(2) == nq && kinds.shape(3) == nk,
                     "block_mask_from_kinds: 'kinds' has {} x {} blocks per head, expected {} x {} for Q_LEN={}, "
                     "KV_LEN={} and blocks {} x {}", kinds.shape(2), kinds.shape(3), nq, nk, L, S, q_block, kv_block);
        py::gil_scoped_release release;
        return block_mask_from_kinds(mm, k, kinds.shape(0), kinds.shape(1), L, S, q_block, kv_block);
      },
      py::arg("kinds"), py::arg("mask_mod"), py::arg("Q_LEN"), py::arg("KV_LEN"), py::arg("q_block") = 128,
      py::arg("kv_block") = 128,
      "A BlockMask from a table of block kinds (as BlockMask.block_kinds gives), mask_mod evaluated in partial blocks.");

  m.def(
      "flex_attention",
      [](const py::object& q, const py::object& k, const py::object& v, const BlockMask* block_mask,
         const py::object& score_mod, double scale, bool return_lse) -> py::object {
        FlexOptions o;
        o.block_mask = block_mask;
        o.score_mod = to_score_mod(score_mod);
        o.scale = scale;
        o.return_lse = return_lse;
        const Tensor tq = to_tensor(q, "q"), tk = to_tensor(k, "k"), tv = to_tensor(v, "v");
        FlexResult r;
        {
          py::gil_scoped_release release;
          r = flex_attention(tq, tk, tv, o);
        }
        if (return_lse) return py::make_tuple(r.out, r.lse);
        return py::cast(r.out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("block_mask") = nullptr, py::arg("score_mod") = py::none(),
      py::arg("scale") = 0.0, py::arg("return_lse") = false,
      "q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] -> out [B, Hq, L, Dv] (and lse [B, Hq, L] f32, f64 for f64 "
      "inputs).");

  m.def(
      "flex_attention_backward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& out, const py::object& lse,
         const py::object& d_out, const BlockMask* block_mask, const py::object& score_mod, double scale,
         bool return_score_mod_grads, const py::object& d_lse) {
        FlexOptions o;
        o.block_mask = block_mask;
        o.score_mod = to_score_mod(score_mod);
        o.scale = scale;
        o.score_mod_grads = return_score_mod_grads;
        const Tensor tq = to_tensor(q, "q"), tk = to_tensor(k, "k"), tv = to_tensor(v, "v");
        const Tensor to = to_tensor(out, "out"), tl = to_tensor(lse, "lse"), tg = to_tensor(d_out, "d_out");
        const Tensor tdl = d_lse.is_none() ? Tensor() : to_tensor(d_lse, "d_lse");
        FlexGrads g;
        {
          py::gil_scoped_release release;
          g = flex_attention_backward(tq, tk, tv, to, tl, tg, tdl, o);
        }
        if (return_score_mod_grads) return py::make_tuple(g.dq, g.dk, g.dv, py::cast(g.score_mod_grads));
        return py::make_tuple(g.dq, g.dk, g.dv);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("d_out"),
      py::arg("block_mask") = nullptr, py::arg("score_mod") = py::none(), py::arg("scale") = 0.0,
      py::arg("return_score_mod_grads") = false, py::arg("d_lse") = py::none(),
      "Gradients (dq, dk, dv) of flex_attention, deterministic at a fixed thread count; d_lse [B, Hq, L]: a "
      "gradient on lse too (None: none). With "
      "return_score_mod_grads: (dq, dk, dv, grads), grads a list with the f32 (f64 for f64 inputs) gradient of each parameter table of "
      "score_mod in chain order (relative_position_bias [rows, 2R + 1], alibi [slopes]).");

  auto sdpa_options = [](const py::object& attn_mask, bool causal, double scale) {
    SdpaOptions o;
    if (!attn_mask.is_none()) {
      // torch 1.13 cannot export bool tensors through DLPack: take those through NumPy (zero-copy).
      py::object m = attn_mask;
      if (py::hasattr(m, "dtype") && std::string(py::str(m.attr("dtype"))) == "torch.bool") m = m.attr("numpy")();
      o.attn_mask = to_tensor(m, "attn_mask");
      if (o.attn_mask.dtype() == DType::u8) o.attn_mask = o.attn_mask.view_as_dtype(DType::boolean);
    }
    o.causal = causal;
    o.scale = scale;
    return o;
  };
  m.def(
      "sdpa",
      [sdpa_options](const py::object& q, const py::object& k, const py::object& v, const py::object& attn_mask,
                     bool causal, double scale) {
        const SdpaOptions o = sdpa_options(attn_mask, causal, scale);
        const Tensor tq = to_tensor(q, "q"), tk = to_tensor(k, "k"), tv = to_tensor(v, "v");
        SdpaResult r;
        {
          py::gil_scoped_release release;
          r = sdpa(tq, tk, tv, o);
        }
        return py::make_tuple(r.out, r.lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("attn_mask") = py::none(), py::arg("causal") = false,
      py::arg("scale") = 0.0, "Dense flash-style attention -> (out, lse). attn_mask: bool, true = attend.");
  m.def(
      "sdpa_backward",
      [sdpa_options](const py::object& q, const py::object& k, const py::object& v, const py::object& out,
                     const py::object& lse, const py::object& d_out, const py::object& attn_mask, bool causal,
                     double scale) {
        const SdpaOptions o = sdpa_options(attn_mask, causal, scale);
        const Tensor tq = to_tensor(q, "q"), tk = to_tensor(k, "k"), tv = to_tensor(v, "v");
        const Tensor to = to_tensor(out, "out"), tl = to_tensor(lse, "lse"), tg = to_tensor(d_out, "d_out");
        FlexGrads g;
        {
          py::gil_scoped_release release;
          g = sdpa_backward(tq, tk, tv, to, tl, tg, o);
        }
        return py::make_tuple(g.dq, g.dk, g.dv);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("d_out"),
      py::arg("attn_mask") = py::none(), py::arg("causal") = false, py::arg("scale") = 0.0);
}

}  // namespace lmcore::python
