"""lmcore upgrade-check against independent checks done with Python's own tokenize module:
over Debian's torch 1.13 sources (every finding sits on a code token, never inside a comment or
string, and the renamed collectives are found exactly where tokenize sees their names), and over
the corpus after --fix (the result compiles and only the renamed identifiers changed)."""
import io
import json
import os
import pathlib
import py_compile
import re
import shutil
import subprocess
import tokenize

import pytest

from conftest import BUILD, ROOT

LMCORE = BUILD / "lmcore"
TORCH = pathlib.Path("/usr/lib/python3/dist-packages/torch")
CORPUS = ROOT / "tests" / "upgrade" / "corpus"
OLD_NAMES = {"all_gather_into_tensor", "reduce_scatter_tensor"}

pytestmark = pytest.mark.skipif(not LMCORE.exists(), reason=f"{LMCORE} not built")


def run(*args, cwd=None):
    return subprocess.run([str(LMCORE), "upgrade-check", "--no-cuda-env", *args], cwd=cwd,
                          capture_output=True, text=True, errors="surrogateescape")


def tokens_of(path):
    with open(path, "rb") as f:
        return list(tokenize.tokenize(f.readline))


@pytest.fixture(scope="module")
def torch_findings():
    r = run("--format", "json", str(TORCH))
    assert r.returncode == 1, r.stderr
    return json.loads(r.stdout), r.stderr


def test_torch_tree_file_count(torch_findings):
    _, summary = torch_findings
    n = sum(1 for _ in TORCH.rglob("*.py"))
    assert n == 1141
    assert f"in {n} python file(s)" in summary


def test_torch_findings_sit_on_code_tokens(torch_findings):
    findings, _ = torch_findings
    by_file = {}
    for f in findings:
        by_file.setdefault(f["filename"], []).append(f)
    assert sum(len(v) for v in by_file.values()) == len(findings) > 0
    for path, fs in by_file.items():
        toks = tokens_of(path)
        starts = {(t.start[0], t.start[1]): t for t in toks}
        for f in fs:
            assert f["code"][:4] == "UPG1" or f["code"][:4] == "UPG2", f
            t = starts.get((f["line"], f["column"] - 1))
            assert t is not None, f"{path}:{f['line']}:{f['column']} is not the start of a token"
            # A name, or (UPG210) a string literal passed as an argument: never a comment, and
            # never a position inside a string.
            if f["code"] == "UPG210":
                assert t.type == tokenize.STRING, (f, t)
            else:
                assert t.type == tokenize.NAME, (f, t)
                assert t.end == (f["end_line"], f["end_column"] - 1), (f, t)


def test_torch_renamed_collectives_match_tokenize(torch_findings):
    """Every NAME token spelled like a renamed collective in the torch tree is a use (none there is
    an unrelated name), so the positions must be exactly those tokenize reports."""
    findings, _ = torch_findings
    ours = {(f["filename"], f["line"], f["column"] - 1) for f in findings if f["code"] in ("UPG101", "UPG102")}
    theirs = set()
    for path in TORCH.rglob("*.py"):
        data = path.read_bytes()
        if not any(n.encode() in data for n in OLD_NAMES):
            continue
        for t in tokens_of(path):
            if t.type == tokenize.NAME and t.string in OLD_NAMES:
                theirs.add((str(path), t.start[0], t.start[1]))
    assert theirs and ours == theirs


def test_torch_named_tensor_methods_match_tokenize(torch_findings):
    """refine_names / has_names / align_as are unique to named tensors: every `.name` attribute
    token tokenize sees (receiver not an imported module) must be reported, and nothing else."""
    findings, _ = torch_findings
    codes = {"refine_names": "UPG202", "has_names": "UPG206", "align_as": "UPG205"}
    ours = {(f["filename"], f["line"], f["column"] - 1) for f in findings if f["code"] in codes.values()}
    theirs = set()
    for path in TORCH.rglob("*.py"):
        data = path.read_bytes()
        if not any(n.encode() in data for n in codes):
            continue
        toks = [t for t in tokens_of(path) if t.type not in (tokenize.NL, tokenize.COMMENT)]
        for i, t in enumerate(toks):
            if t.type == tokenize.NAME and t.string in codes and i > 0 and toks[i - 1].string == ".":
                theirs.add((str(path), t.start[0], t.start[1]))
    assert theirs and ours == theirs


def test_fix_compiles_and_changes_only_renamed_names(tmp_path):
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work, ignore=shutil.ignore_patterns("expected"))
    diff = run("--diff", ".", cwd=work)
    assert diff.returncode == 1 and diff.stdout.startswith("--- a/")
    before = {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}
    r = run("--fix", ".", cwd=work)
    assert r.returncode == 1, r.stderr  # unfixable findings (named tensors, CUDA pins) remain
    assert "fixed" in r.stderr
    renamed = {"all_gather_into_tensor": "all_gather_single", "reduce_scatter_tensor": "reduce_scatter_single",
               "all_gather_tensor": "all_gather_single", "all_gather_tensor_autograd": "all_gather_single_autograd",
               "reduce_scatter_tensor_autograd": "reduce_scatter_single_autograd",
               "all_gather_into_tensor_coalesced": "all_gather_single_coalesced",
               "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced"}
    changed = 0
    for p in sorted(work.glob("*.py")):
        after = p.read_bytes()
        if p.name in ("syntax_error.py", "not_utf8.py"):
            continue  # broken on purpose; checked below for untouched bytes only
        py_compile.compile(str(p), doraise=True, cfile=str(tmp_path / (p.name + "c")))
        if after == before[p.name]:
            continue
        changed += 1
        old = [t for t in tokenize.tokenize(io.BytesIO(before[p.name]).readline)]
        new = [t for t in tokenize.tokenize(io.BytesIO(after).readline)]
        assert len(old) == len(new), p.name
        for a, b in zip(old, new):
            assert a.type == b.type, (p.name, a, b)
            if a.string != b.string:
                if a.type == tokenize.STRING:
                    # Python 3.11 keeps an f-string as one token: the change must be a rename of a
                    # whole identifier inside it (a replacement field).
                    assert a.string.lstrip("rR")[:1] in "fF", (p.name, a, b)
                    expect = re.sub(r"\b(" + "|".join(sorted(renamed, key=len, reverse=True)) + r")\b",
                                    lambda m: renamed[m.group(1)], a.string)
                    assert expect == b.string, (p.name, a, b)
                else:
                    assert a.type == tokenize.NAME and renamed.get(a.string) == b.string, (p.name, a, b)
    assert changed >= 8
    # The notebook is edited in place: still the same JSON apart from the renamed identifier.
    nb_before = json.loads(before["notebook.ipynb"])
    nb_after = json.loads((work / "notebook.ipynb").read_bytes())
    for cell in nb_before["cells"]:
        if cell["cell_type"] == "code":
            fix = lambda line: line.replace("dist.all_gather_into_tensor(", "dist.all_gather_single(")
            src = cell["source"]
            cell["source"] = fix(src) if isinstance(src, str) else [fix(line) for line in src]
    assert nb_after == nb_before
    assert (work / "notebook.ipynb").read_bytes() != before["notebook.ipynb"]
    # The files that do not compile are left as they were, apart from renames before the error.
    assert (work / "not_utf8.py").read_bytes() == before["not_utf8.py"]
    # A second --fix has nothing left to do.
    again = run("--diff", ".", cwd=work)
    assert again.stdout == ""


def test_exit_codes_and_formats(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nx = torch.ones(2)\n")
    assert run(str(clean)).returncode == 0
    assert run(str(tmp_path / "missing.py")).returncode == 2
    assert run("--format", "xml", str(clean)).returncode == 2
    assert run("--no-such-flag").returncode == 2
    rules = subprocess.run([str(LMCORE), "upgrade-check", "--rules"], capture_output=True, text=True)
    assert rules.returncode == 0 and "UPG101" in rules.stdout and "UPG306" in rules.stdout
    sarif = json.loads(run("--format", "sarif", "--select", "UPG1", str(CORPUS / "aliases.py")).stdout)
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"UPG101", "UPG102"}
    high = json.loads(run("--format", "json", "--min-confidence", "high", str(CORPUS / "named_tensors.py")).stdout)
    assert high and all(f["confidence"] == "high" for f in high)


def test_installed_cuda_is_reported():
    r = subprocess.run([str(LMCORE), "upgrade-check", str(CORPUS / "aliases.py")], capture_output=True, text=True)
    if os.path.exists("/usr/local/cuda/bin/nvcc"):
        out = subprocess.run(["/usr/local/cuda/bin/nvcc", "--version"], capture_output=True, text=True).stdout
        release = out.split("release ")[1].split(",")[0]
        assert f"cuda toolkit {release}" in r.stderr, r.stderr
    else:
        assert "cuda" in r.stderr


# ---- the dimension-parameter table against torch 1.13's own signatures ------------------------

def _torch_dim_signatures():
    """Every Dimname overload in torch/_C/__init__.pyi (Tensor methods) and _VariableFunctions.pyi
    (torch functions), written as `lmcore upgrade-check --rules` prints them; the ops owned by other
    rules (rename/refine_names/align_to, unflatten, factories' names=) are left out, and `out=` is
    dropped from function forms."""
    import ast
    pyi = TORCH / "_C"
    kinds = {"Union[str, ellipsis, None]": ": Dimname", "Sequence[Union[str, ellipsis, None]]": ": Sequence[Dimname]"}
    other_rules = {"rename", "rename_", "refine_names", "align_to", "unflatten"}

    def render(prefix, fn, skip_self):
        a = fn.args
        pos = (a.posonlyargs + a.args)[1 if skip_self else 0:]
        first_default = len(pos) - len(a.defaults)
        params, dims = [], False
        for i, p in enumerate(pos):
            t = kinds.get(ast.unparse(p.annotation), "") if p.annotation is not None else ""
            dims |= bool(t) and p.arg != "names"
            params.append(p.arg + t + ("=" if i >= first_default else ""))
        kw = [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if p.arg != "out"]
        if kw:
            params.append("*")
        for p, d in kw:
            t = kinds.get(ast.unparse(p.annotation), "") if p.annotation is not None else ""
            dims |= bool(t) and p.arg != "names"
            params.append(p.arg + t + ("=" if d is not None else ""))
        if not dims or fn.name in other_rules:
            return None
        return f"{prefix}.{fn.name}({', '.join(params)})"

    out = set()
    init = ast.parse((pyi / "__init__.pyi").read_text())
    for cls in init.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "_TensorBase":
            out |= {s for f in cls.body if isinstance(f, ast.FunctionDef) for s in [render("Tensor", f, True)] if s}
    funcs = ast.parse((pyi / "_VariableFunctions.pyi").read_text())
    out |= {s for f in funcs.body if isinstance(f, ast.FunctionDef) for s in [render("torch", f, False)] if s}
    return out


def _lmcore_dim_signatures():
    rules = subprocess.run([str(LMCORE), "upgrade-check", "--rules"], capture_output=True, text=True, check=True).stdout
    block = rules.split("ops and their dimension parameters")[1].split("\n\n")[0]
    return {line.strip() for line in block.splitlines()[1:] if line.strip()}


@pytest.mark.skipif(not (TORCH / "_C" / "__init__.pyi").exists(), reason="torch 1.13 .pyi files not installed")
def test_dim_table_is_torch_signatures():
    ours = _lmcore_dim_signatures()
    # Tensor.size and Tensor.stride take a Dimname through bindings written by hand in torch/csrc,
    # which the .pyi does not list; check them on a named tensor instead.
    by_hand = {"Tensor.size(dim: Dimname)", "Tensor.stride(dim: Dimname)"}
    assert ours - by_hand == _torch_dim_signatures()
    assert by_hand <= ours
    import warnings
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.zeros(2, 3, names=("N", "C"))
        assert t.size("C") == 3 and t.stride("C") == 1
        # The cases the table leaves out on purpose: norm's named overloads cannot run, and a
        # dimension name must be an identifier.
        with pytest.raises(RuntimeError, match="not yet supported with named tensors"):
            t.norm(2, "C")
        with pytest.raises(RuntimeError, match="Invalid name"):
            t.unbind("<KeyPress>")
        with pytest.raises(TypeError):
            t.flatten("F")


# ---- Debian's installed Python packages: no default finding without torch ----------------------

def _module_name(path):
    """Dotted module name from the chain of parent folders holding an __init__.py (as scan does)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    d = path.parent
    while (d / "__init__.py").exists():
        parts.append(d.name)
        d = d.parent
    return ".".join(reversed(parts))


def _imports(path):
    """(modules imported, imports torch) by Python's own ast, relative imports resolved."""
    import ast
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in old sources
            tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return set(), False
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".") if package else []
                if node.level - 1 > len(pkg):
                    continue
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            if base:
                mods.add(base)
                mods |= {f"{base}.{a.name}" for a in node.names if a.name != "*"}
    torch_use = module == "torch" or module.startswith("torch.") or any(
        m == "torch" or m.startswith("torch.") for m in mods)
    return mods, torch_use


def _uses_torch(path, root, cache):
    """The file imports torch, or imports a module of the tree under `root` that does."""
    mods, direct = _imports(path)
    if direct:
        return True
    for m in mods:
        if m not in cache:
            cache[m] = False
            rel = pathlib.Path(*m.split("."))
            for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if cand.exists() and _module_name(cand) == m:
                    cache[m] = _imports(cand)[1]
                    break
        if cache[m]:
            return True
    return False


DEBIAN_TREES = [p for p in (pathlib.Path("/usr/lib/python3.11"), pathlib.Path("/usr/lib/python3/dist-packages"))
                if p.is_dir()]


@pytest.mark.skipif(not DEBIAN_TREES, reason="no Debian Python packages installed")
@pytest.mark.parametrize("root", DEBIAN_TREES, ids=lambda p: str(p))
def test_debian_packages_have_no_default_finding_without_torch(root):
    r = run("--format", "json", str(root))
    assert r.returncode in (0, 1), r.stderr
    cache = {}
    found = json.loads(r.stdout)
    outside = sorted({f["filename"] for f in found if not _uses_torch(pathlib.Path(f["filename"]), root, cache)})
    assert outside == [], f"default findings in files that use no torch: {outside[:10]}"
    # The wide net is still there: --min-confidence low reports the same names outside torch.
    low = json.loads(run("--format", "json", "--min-confidence", "low", str(root)).stdout)
    low_outside = [f for f in low if not _uses_torch(pathlib.Path(f["filename"]), root, cache)]
    assert low_outside and all(f["confidence"] == "low" for f in low_outside)


def test_prefilter_keeps_torch_findings_identical():
    """The files the prefilter rules out give no finding: the same findings with every file tokenized."""
    fast = run("--format", "json", "--min-confidence", "low", str(TORCH))
    full = run("--format", "json", "--min-confidence", "low", "--no-prefilter", str(TORCH))
    assert fast.returncode == full.returncode == 1
    assert json.loads(fast.stdout) == [f for f in json.loads(full.stdout) if f["code"][:4] in ("UPG1", "UPG2")]
