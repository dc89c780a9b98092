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
