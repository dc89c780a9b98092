// The rule table of upgrade-check: codes, names and the explanations `--rules` prints.
#include "lmcore/upgrade/rules.h"

#include <algorithm>
#include <tuple>

namespace lmcore::upgrade {

std::optional<Confidence> confidence_from_name(std::string_view name) {
  for (Confidence c : {Confidence::low, Confidence::medium, Confidence::high})
    if (name == confidence_name(c)) return c;
  return std::nullopt;
}

const char* confidence_name(Confidence c) {
  switch (c) {
    case Confidence::low: return "low";
    case Confidence::medium: return "medium";
    case Confidence::high: return "high";
  }
  return "?";
}

const std::vector<Rule>& all_rules() {
  static const std::vector<Rule> rules = {
      {"UPG101", "renamed-all-gather-into-tensor",
       "torch.distributed.all_gather_into_tensor is renamed all_gather_single",
       "PyTorch 2.13 renames torch.distributed.all_gather_into_tensor to all_gather_single (same "
       "arguments). Found however it is reached: `import torch.distributed as dist`, `from "
       "torch.distributed import all_gather_into_tensor [as x]`, `torch.distributed.x`, "
       "torch.distributed.distributed_c10d, a star import, or a plain `name = dist` alias; as a call, "
       "over several lines, or as a value (passed or stored). --fix renames the identifier in place; an "
       "`import ... as alias` gets its imported name renamed and the alias kept.",
       true},
      {"UPG102", "renamed-reduce-scatter-tensor",
       "torch.distributed.reduce_scatter_tensor is renamed reduce_scatter_single",
       "PyTorch 2.13 renames torch.distributed.reduce_scatter_tensor to reduce_scatter_single (same "
       "arguments). Resolution and fixing as for UPG101.",
       true},
      {"UPG103", "renamed-functional-collective",
       "functional collectives all_gather_tensor / reduce_scatter_tensor (and _autograd) are renamed",
       "In torch.distributed._functional_collectives, all_gather_tensor -> all_gather_single, "
       "all_gather_tensor_autograd -> all_gather_single_autograd, reduce_scatter_tensor -> "
       "reduce_scatter_single, reduce_scatter_tensor_autograd -> reduce_scatter_single_autograd, "
       "following the torch.distributed renames. Resolution and fixing as for UPG101.",
       true},
      {"UPG104", "renamed-coalesced-collective",
       "coalesced functional collectives are renamed (*_single_coalesced)",
       "In torch.distributed._functional_collectives, all_gather_into_tensor_coalesced -> "
       "all_gather_single_coalesced and reduce_scatter_tensor_coalesced -> "
       "reduce_scatter_single_coalesced. Resolution and fixing as for UPG101.",
       true},
      {"UPG201", "named-tensor-names", "Tensor.names is removed (named tensors)",
       "Named tensors are removed in PyTorch 2.13, and with them the `.names` attribute. Reported for "
       "every `.names` read or write that is not a call and whose receiver is not an imported module. "
       "Confidence (the same for every UPG2xx rule): high when the receiver is known to be a tensor (a "
       "name assigned from a torch call, annotated torch.Tensor, or torch.Tensor itself) or the callee "
       "resolves to torch. Otherwise the finding needs evidence of a tensor: the file imports torch, or "
       "imports a module of the scanned tree that does; and a receiver that comes from a call into "
       "another module (`np.dtype(...).names`, or `arr` after `arr = np.zeros(3)`) needs that module "
       "to import torch. With evidence, medium here; without, low, which the default --min-confidence "
       "(medium) leaves out, since `.names` is a common attribute elsewhere (NumPy structured dtypes, "
       "ast.Import.names, argparse results). Fix by hand: keep dimension names in your own metadata, or "
       "index dimensions by position.",
       false},
      {"UPG202", "named-tensor-refine-names", "Tensor.refine_names() is removed (named tensors)",
       "Named tensors are removed. `.refine_names(` is reported with high confidence (the method name is "
       "unique to named tensors) where there is evidence of a tensor, low otherwise (see UPG201). Remove "
       "the call; assert shapes by position instead.",
       false},
      {"UPG203", "named-tensor-rename", "Tensor.rename() / rename_() with dimension names is removed",
       "Reported when the arguments look like dimension names: `None`, `...`, string literals, or "
       "keywords whose values are string literals. `.rename_(` is high confidence. `.rename(` is high on a "
       "known tensor or with a `None` argument, medium with two or more string arguments or string-valued "
       "keywords on an unknown receiver, and not reported with a single string argument on an unknown "
       "receiver (that is pathlib.Path.rename) or on an imported module (os.rename). pandas' "
       "rename(columns={...}) has non-string values and is not reported. Low without evidence of a "
       "tensor (see UPG201).",
       false},
      {"UPG204", "named-tensor-align-to", "Tensor.align_to() is removed (named tensors)",
       "Named tensors are removed. Replace align_to by permute with explicit positions. Confidence high on "
       "a known tensor, medium otherwise, low without evidence of a tensor (see UPG201).",
       false},
      {"UPG205", "named-tensor-align-as", "Tensor.align_as() is removed (named tensors)",
       "Named tensors are removed. Replace align_as by permute/unsqueeze with explicit positions. "
       "Confidence high on a known tensor, medium otherwise, low without evidence of a tensor (see "
       "UPG201).",
       false},
      {"UPG206", "named-tensor-has-names", "Tensor.has_names() is removed (named tensors)",
       "Named tensors are removed; has_names() would always be False. High confidence, low without "
       "evidence of a tensor (see UPG201).",
       false},
      {"UPG207", "named-tensor-factory-names", "names= on torch factory functions is removed",
       "torch.empty/zeros/ones/full/rand/randn/randint/tensor and their _like forms no longer accept "
       "names=. Reported with high confidence when the callee resolves to torch through imports. Remove "
       "the argument.",
       false},
      {"UPG208", "named-tensor-align-tensors", "torch.align_tensors is removed",
       "torch.align_tensors aligned named tensors and is removed. High confidence (resolved through "
       "imports).",
       false},
      {"UPG209", "named-tensor-unflatten", "Tensor.unflatten() with named shapes is removed",
       "Reported when unflatten's dim is a string or its sizes are (name, size) pairs, e.g. "
       "x.unflatten('C', (('C1', 2), ('C2', 4))). High confidence, low without evidence of a tensor (see "
       "UPG201). Pass a dimension index and plain sizes.",
       false},
      {"UPG210", "named-tensor-dim-name", "a dimension name passed as dim is no longer accepted",
       "Reported for a string literal that PyTorch 1.13 took as a dimension name. The call's arguments "
       "are bound to the op's signatures (listed below, from torch 1.13's own) as Python binds them: "
       "positions, keywords, required parameters. A string must land on a Dimname parameter (or a "
       "Sequence[Dimname] one, which also takes a tuple/list of strings) and be an identifier, as PyTorch "
       "requires of names. So t.norm('fro') and t.norm(p='nuc') (the norm's p; norm's named overloads "
       "were never usable), t.flatten(0, 1), NumPy's x.flatten('F') (every named flatten needs out_dim) "
       "and tkinter's unbind('<KeyPress>') (not an identifier) are not reported. Tensor methods bind to "
       "the Tensor forms, torch.op(t, ...) to the function forms; other torch callees "
       "(torch.nn.functional.softmax) by keyword only. One finding per call, at its first dimension "
       "name. High when the callee resolves to torch or the receiver is a known tensor; medium with "
       "evidence of a tensor, low without (see UPG201). Pass the dimension's index.",
       false},
      {"UPG301", "cuda-toolkit-too-old", "the installed CUDA toolkit is older than 13.0",
       "PyTorch 2.13 is built for CUDA 13.0 or later; the 12.8 and 12.9 builds are gone. The toolkit "
       "version is read from `nvcc --version` and from version.json of each /usr/local/cuda* (or "
       "--cuda-root) install.",
       false},
      {"UPG302", "cuda-runtime-too-old", "the installed CUDA runtime (libcudart) is older than 13.0",
       "The runtime version comes from cudaRuntimeGetVersion() of each libcudart found (loaded with "
       "dlopen; no GPU needed), or from its file name when it cannot be loaded.",
       false},
      {"UPG303", "cuda-wheel-pin", "a PyTorch wheel index or local version pins CUDA < 13 (cu118..cu129)",
       "Flags download.pytorch.org/whl/cuNNN index URLs (--index-url, --extra-index-url, -f) and "
       "`+cuNNN` local versions with NNN below 130, in requirement files, shell scripts, Dockerfiles, CI "
       "YAML and notebook `!pip` lines. Use cu130 or later.",
       false},
      {"UPG304", "cuda-conda-pin", "a conda pin requires CUDA < 13 (pytorch-cuda, cudatoolkit, cuda-version)",
       "Flags pytorch-cuda=12.x, cudatoolkit=11.x, cuda-version=12.x, cuda-toolkit/cuda-runtime/"
       "cuda-nvcc=12.x in conda environment files and `conda install` lines.",
       false},
      {"UPG305", "cuda-docker-image", "a Dockerfile uses a CUDA < 13 base image or CUDA_VERSION",
       "Flags FROM nvidia/cuda:12.x..., FROM pytorch/pytorch:*-cuda12.x-*, and ARG/ENV CUDA_VERSION below "
       "13 in Dockerfiles (Dockerfile, Dockerfile.*, *.dockerfile).",
       false},
      {"UPG306", "cuda-package-pin", "a pip requirement installs packages built for CUDA < 13",
       "Flags pip packages with a CUDA-major suffix below 13: nvidia-*-cu11/-cu12, cupy-cuda11x/12x, "
       "jax[cuda11]/jax[cuda12] and similar, in requirement and constraint files and pip lines.",
       false},
      {"UPG901", "unreadable-file", "a file could not be read", "The scan reports it and goes on.", false},
      {"UPG902", "bad-encoding", "a Python file is not valid in its encoding",
       "Files are UTF-8 unless a PEP 263 cookie names another encoding; single-byte encodings (latin-1, "
       "cp1252, ...) are accepted. The file is not checked further.",
       false},
      {"UPG903", "syntax-error", "a Python file (or notebook cell) could not be tokenized",
       "Unterminated strings, unbalanced brackets, inconsistent indentation, stray characters. Findings "
       "before the error are still reported. Files that name none of the removed or renamed APIs are not "
       "tokenized (they can give no finding), so their errors show only with --no-prefilter.",
       false},
      {"UPG904", "bad-notebook", "a .ipynb file is not a valid notebook",
       "The notebook is not JSON or has no list of cells; it is not checked further.", false},
  };
  return rules;
}

const Rule* find_rule(std::string_view code) {
  for (const auto& r : all_rules())
    if (r.code == code) return &r;
  return nullptr;
}

bool finding_less(const Finding& a, const Finding& b) {
  return std::tie(a.path, a.cell, a.line, a.col, a.code, a.message) <
         std::tie(b.path, b.cell, b.line, b.col, b.code, b.message);
}

}  // namespace lmcore::upgrade
