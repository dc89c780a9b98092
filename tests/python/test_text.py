"""lmcore.Tokenizer against references written here in Python, sharing no code with lmcore:

* the split patterns against Debian's python3-regex on `bytes.decode("utf-8", "surrogateescape")`
  (an invalid byte becomes a lone surrogate, a character of no letter/number/space class);
* encode against GPT-2's original encoder algorithm (byte-level alphabet, lowest-ranked bigram merged
  everywhere until none is left) on a tokenizer lmcore trained and on one written here by hand;
* training against a naive trainer that recounts every pair before each merge;
* decode's replacement characters against Python's own UTF-8 decoder ("replace");
* `lmcore tokenizer` and `lmcore tokenize` (shards read back with NumPy).

The corpus is real files found on every machine with lmcore's dependencies (the Python standard
library, man pages in English, Japanese, Chinese, Russian, ...) plus generated text (emoji sequences,
CJK, combining marks, right-to-left scripts, long runs of white space, invalid UTF-8)."""
import gzip
import json
import os
import pathlib
import random
import sysconfig
import unicodedata
from collections import Counter

import numpy as np
import pytest
import regex

import lmcore
from io_helpers import run_cli

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
PATTERNS = {"gpt2": regex.compile(GPT2_PATTERN), "llama3": regex.compile(LLAMA3_PATTERN)}


# ---- references ----

def ref_split(data: bytes, pattern: str):
    text = data.decode("utf-8", "surrogateescape")
    pieces = [p.encode("utf-8", "surrogateescape") for p in PATTERNS[pattern].findall(text)]
    assert b"".join(pieces) == data  # both patterns match every character
    return pieces


def byte_alphabet():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100 onwards."""
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = byte_alphabet()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def to_byte_level(data: bytes) -> str:
    return "".join(BYTE_CHAR[b] for b in data)


def from_byte_level(s: str) -> bytes:
    return bytes(CHAR_BYTE[c] for c in s)


class Gpt2Encoder:
    """GPT-2's encoder.py algorithm on a tokenizer.json's vocab and merges."""

    def __init__(self, tokenizer_json: dict, pattern: str):
        model = tokenizer_json["model"]
        self.vocab = model["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.pattern = pattern
        self.cache = {}

    def bpe(self, token: str):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        self.cache[token] = word
        return word

    def encode(self, data: bytes):
        ids = []
        for piece in ref_split(data, self.pattern):
            ids.extend(self.vocab[t] for t in self.bpe(to_byte_level(piece)))
        return ids


def naive_train(docs, vocab_size, specials, pattern):
    """Counts pieces, then before every merge recounts every adjacent pair (weighted by the piece's
    count) and merges the most frequent, the smallest (left id, right id) among ties; the new token's id
    is the next one unless its bytes are already a token. Returns (token bytes by id, merges as ids)."""
    counts = Counter()
    cut = regex.compile(b"|".join(regex.escape(s.encode()) for s in sorted(specials, key=len, reverse=True))) \
        if specials else None
    for d in docs:
        for seg in (cut.split(d) if cut else [d]):
            counts.update(ref_split(seg, pattern))
    tokens = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    words = [(list(p), c) for p, c in counts.items() if len(p) > 1]
    merges = []
    while len(tokens) < vocab_size - len(specials):
        pairs = Counter()
        for w, c in words:
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        new = tokens[a] + tokens[b]
        if new not in index:
            index[new] = len(tokens)
            tokens.append(new)
        t = index[new]
        merges.append((a, b))
        for w, _ in words:
            i = 0
            while i + 1 < len(w):
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [t]
                i += 1
    return tokens, merges


def lm_model(tok):
    """(token bytes by id, merges as id pairs) from lmcore's tokenizer.json, decoded here."""
    j = json.loads(tok.to_json())
    vocab = j["model"]["vocab"]
    by_id = {i: from_byte_level(s) for s, i in vocab.items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    merges = [tuple(vocab[p] for p in (m.split(" ") if isinstance(m, str) else m)) for m in j["model"]["merges"]]
    return tokens, merges


# ---- the corpus ----

def stdlib_files(n):
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    names = ["argparse.py", "textwrap.py", "difflib.py", "email/_header_value_parser.py", "locale.py", "tokenize.py"]
    files = [root / n for n in names if (root / n).is_file()]
    return [(str(f), f.read_bytes()) for f in files[:n]]


def man_pages():
    out = []
    for lang in ["", "ja", "zh_CN", "zh_TW", "ru", "ko", "de", "uk", "pl"]:
        d = pathlib.Path("/usr/share/man") / lang / "man1"
        for f in sorted(d.glob("*.1.gz"))[:2]:
            out.append((str(f), gzip.decompress(f.read_bytes())))
    return out


def generated_docs(seed=0):
    rng = random.Random(seed)
    emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🏳️‍🌈", "❤️", "🧑🏿‍🚀", "✨"]
    cjk = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 400))
    kana = "".join(chr(c) for c in range(0x3041, 0x3097))
    hangul = "".join(chr(c) for c in range(0xAC00, 0xAC00 + 200))
    arabic = "السلام عليكم ورحمة الله ١٢٣ مرحبا"
    hebrew = "שָׁלוֹם עוֹלָם 42"
    devanagari = "नमस्ते दुनिया १२३४"
    words = ["the", "The", "it's", "IT'S", "we'll", "they'VE", "x1234567", "3.14159", "e\u0301t\u00e9", "naïve",
             "Z\u0351\u0352a\u0353l\u0354g\u0355o", "ﬁ", "Ⅻ", "½", "٣", "𝕏", "ß", "İstanbul", "ǅ"]
    docs = []
    for _ in range(30):
        parts = []
        for _ in range(rng.randrange(50, 400)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(words))
            elif r < 0.4:
                parts.append(rng.choice(emoji) * rng.randrange(1, 4))
            elif r < 0.5:
                parts.append("".join(rng.choice(cjk + kana + hangul) for _ in range(rng.randrange(1, 12))))
            elif r < 0.55:
                parts.append(rng.choice([arabic, hebrew, devanagari]))
            elif r < 0.65:
                parts.append(rng.choice([" ", "  ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u3000", "\u00a0", "\u2028",
                                         "\x85", "\u180e", " " * rng.randrange(100, 1200)]))
            else:
                parts.append(rng.choice(" ,.;:!?()[]{}<>'\"-_/\\|@#$%^&*+=~`"))
        doc = "".join(parts).encode()
        if rng.random() < 0.5:  # invalid UTF-8: stray continuation bytes, truncated sequences, surrogates
            b = bytearray(doc)
            for _ in range(rng.randrange(1, 20)):
                b[rng.randrange(len(b) + 1):0] = rng.choice([b"\xff", b"\x80", b"\xe2\x82", b"\xed\xa0\x80",
                                                             b"\xc0\xaf", b"\xf0\x9f\x98", b"\xfe\xfe"])
            doc = bytes(b)
        docs.append(doc)
    return [(f"generated-{i}", d) for i, d in enumerate(docs)]


def random_unicode_strings(n, seed=1):
    """Strings of code points assigned in Python's Unicode (14.0, as PCRE2 10.42's tables), any class."""
    rng = random.Random(seed)
    ranges = [(0x20, 0x7F), (0x80, 0x250), (0x300, 0x370), (0x370, 0x530), (0x590, 0x700), (0x900, 0x980),
              (0x1680, 0x1690), (0x1800, 0x1810), (0x2000, 0x2070), (0x2150, 0x2190), (0x3000, 0x3100),
              (0x4E00, 0x4E80), (0xAC00, 0xAC80), (0xFB00, 0xFB50), (0xFE00, 0xFE20), (0xFF00, 0xFF70),
              (0x1D400, 0x1D480), (0x1F300, 0x1F700), (0x10330, 0x10350)]
    pool = [chr(c) for lo, hi in ranges for c in range(lo, hi) if unicodedata.category(chr(c)) != "Cn"]
    pool += ["\n", "\r", "\t", "'", "'s", "'LL", " ", "  "]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 40)))
        b = s.encode()
        if rng.random() < 0.3:
            i = rng.randrange(len(b) + 1)
            b = b[:i] + bytes([rng.randrange(0x80, 0x100)]) + b[i:]
        # An inserted byte may complete a sequence into a character that Unicode 15 assigned (python3-regex
        # knows it, PCRE2 10.42 does not): such strings test the Unicode version, not the split.
        if all(unicodedata.category(c) != "Cn" for c in b.decode("utf-8", "surrogateescape") if not 0xDC80 <= ord(c) <= 0xDCFF):
            out.append(b)
    return out


@pytest.fixture(scope="module")
def corpus():
    docs = stdlib_files(6) + man_pages() + generated_docs()
    assert len(docs) >= 40 and sum(len(d) for _, d in docs) > 500_000
    assert any(n.startswith("/usr/share/man/ja") for n, _ in docs), "Japanese man pages (man-db) not found"
    return docs


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    """A GPT-2-pattern and a Llama-3-pattern tokenizer that lmcore trained on part of the corpus."""
    d = tmp_path_factory.mktemp("trained")
    files = []
    for i, (_, data) in enumerate(corpus[::2]):
        f = d / f"doc{i}.txt"
        f.write_bytes(data)
        files.append(str(f))
    out = {}
    for pattern in ["gpt2", "llama3"]:
        tok = lmcore.Tokenizer.train(files, vocab_size=3000, special_tokens=["<|endoftext|>"], pattern=pattern)
        path = d / f"{pattern}.json"
        tok.save(str(path))
        out[pattern] = (lmcore.Tokenizer.from_file(str(path)), json.loads(path.read_text()))
    return out


# ---- split ----

@pytest.mark.parametrize("pattern", ["gpt2", "llama3"])
def test_split_matches_python_regex_on_real_files(corpus, pattern):
    for name, data in corpus:
        got = lmcore.pretokenize(data, pattern)
        want = ref_split(data, pattern)
        if got != want:
            i = next(k for k in range(min(len(got), len(want))) if got[k] != want[k])
            pytest.fail(f"{name}: piece {i} differs: lmcore {got[i]!r} vs regex {want[i]!r} "
                        f"(context {want[max(0, i - 3):i + 3]!r})")


@pytest.mark.parametrize("pattern", ["gpt2", "llama3"])
def test_split_matches_python_regex_on_random_unicode(pattern):
    for s in random_unicode_strings(3000):
        assert lmcore.pretokenize(s, pattern) == ref_split(s, pattern), s


# ---- encode ----

@pytest.mark.parametrize("pattern", ["gpt2", "llama3"])
def test_encode_matches_gpt2_algorithm_trained(corpus, trained, pattern):
    tok, j = trained[pattern]
    ref = Gpt2Encoder(j, pattern)
    for name, data in corpus:
        got, want = tok.encode(data), ref.encode(data)
        assert got == want, f"{name}: first difference at {next(i for i in range(len(want)) if got[i] != want[i])}"
    batch = tok.encode_batch([d for _, d in corpus])
    assert batch == [tok.encode(d) for _, d in corpus]


def hand_made_tokenizer_json(corpus):
    """A tokenizer.json written here: GPT-2's byte order for ids 0..255 (as in GPT-2's encoder.json),
    merges from the naive trainer on other text, their ids shuffled, merges in the [a, b] list form,
    and two added tokens."""
    docs = [d for _, d in corpus[1::4]]
    tokens, merges = naive_train(docs[:6], 700, [], "gpt2")
    rng = random.Random(5)
    ids = list(range(256, len(tokens)))
    rng.shuffle(ids)
    order = [b for b in range(256) if BYTE_CHAR[b] == chr(b)] + [b for b in range(256) if BYTE_CHAR[b] != chr(b)]
    id_of = {b: i for i, b in enumerate(order)}
    id_of.update({t: ids[t - 256] for t in range(256, len(tokens))})
    vocab = {to_byte_level(tokens[t]): id_of[t] for t in range(len(tokens))}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": len(tokens), "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": len(tokens) + 1, "content": "lmcore", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": True, "special": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": [[to_byte_level(tokens[a]), to_byte_level(tokens[b])] for a, b in merges]},
    }


def test_encode_matches_gpt2_algorithm_hand_made(corpus, tmp_path):
    j = hand_made_tokenizer_json(corpus)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(j, ensure_ascii=False))
    tok = lmcore.Tokenizer.from_file(str(path))
    ref = Gpt2Encoder(j, "gpt2")
    for name, data in corpus:
        data = data.replace(b"lmcore", b"lmcor")  # the non-special added token always matches
        assert tok.encode(data) == ref.encode(data), name
    eot = j["added_tokens"][0]["id"]
    assert tok.end_of_text_id == eot
    assert tok.encode("a<|endoftext|>b") == ref.encode(b"a<|endoftext|>b")
    assert tok.encode("a<|endoftext|>b", allow_special=True) == ref.encode(b"a") + [eot] + ref.encode(b"b")
    assert tok.encode("xlmcorey") == ref.encode(b"x") + [eot + 1] + ref.encode(b"y")
    # Written back by lmcore and read again: the same ids.
    tok.save(str(tmp_path / "again.json"))
    again = lmcore.Tokenizer.from_file(str(tmp_path / "again.json"))
    for _, data in corpus[:10]:
        assert again.encode(data) == tok.encode(data)


# ---- decode ----

def test_round_trip_and_replacement(corpus, trained):
    tok, _ = trained["gpt2"]
    rng = random.Random(3)
    samples = [d for _, d in corpus] + [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000))) for _ in range(200)]
    # The edges of Unicode's table 3-7 (leads whose second byte has a narrower range, overlong and surrogate
    # forms, code points past U+10FFFF), each followed by 0-2 continuation bytes and cut at every length.
    edge_bytes = [0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0]
    for lead in (0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF):
        for second in edge_bytes:
            for rest in (b"", b"\x80", b"\xbf\x80", b"\x41"):
                seq = bytes([lead, second]) + rest
                samples += [seq[:k] + b"a" + seq for k in range(1, len(seq) + 1)]
    for data in samples:
        ids = tok.encode(data)
        assert tok.decode_bytes(ids) == data
        assert tok.decode(ids) == data.decode("utf-8", "replace")  # one U+FFFD per maximal invalid subpart
    # Any id sequence decodes, split anywhere in a character.
    for _ in range(200):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(0, 50))]
        raw = tok.decode_bytes(ids)
        assert tok.decode(ids) == raw.decode("utf-8", "replace")
    with pytest.raises(lmcore.Error, match=r"id 3000 at position 1 is not in the vocabulary \(size 3000\)"):
        tok.decode([1, 3000])
    assert tok.decode(np.array(tok.encode("numpy ids"), dtype=np.int32)) == "numpy ids"
    # A str with no UTF-8 form and ids that are not integers or do not fit: errors that say so (pybind11's
    # casts said "Unable to cast Python instance to C++ type").
    for call in (lambda: tok.encode("a\ud800"), lambda: tok.encode_batch(["ok", "\udfff"]),
                 lambda: lmcore.pretokenize("\ud800")):
        with pytest.raises(ValueError, match=r"the text has no UTF-8 form \(UnicodeEncodeError: .*surrogates not allowed"):
            call()
    with pytest.raises(TypeError, match=r"decode: ids must be integers, found <class 'float'> at position 1"):
        tok.decode([1, 1.5])
    with pytest.raises(ValueError, match=r"decode_bytes: id 1180591620717411303424 at position 0 is out of range"):
        tok.decode_bytes([2 ** 70])
    with pytest.raises(ValueError, match=r"decode: id -1 at position 2 is out of range"):
        tok.decode([1, 2, -1])


# ---- training ----

def test_training_matches_naive_trainer(corpus):
    docs = [d for _, d in corpus[:3]] + [d for _, d in corpus[-4:]]
    docs = [d[:40_000] for d in docs]
    docs[0] = docs[0][:2000] + b"<|endoftext|>" + docs[0][2000:]
    for pattern in ["gpt2", "llama3"]:
        tok = lmcore.Tokenizer.train(texts=docs, vocab_size=650, special_tokens=["<|endoftext|>", "<|pad|>"],
                                     pattern=pattern)
        tokens, merges = lm_model(tok)
        want_tokens, want_merges = naive_train(docs, 650, ["<|endoftext|>", "<|pad|>"], pattern)
        assert merges == want_merges, pattern
        assert tokens == want_tokens
        assert tok.vocab_size == 650
        assert tok.token_to_id("<|endoftext|>") == 648 and tok.token_to_id("<|pad|>") == 649


def test_training_is_deterministic(corpus, tmp_path):
    files = []
    for i, (_, data) in enumerate(corpus[:12]):
        files.append(tmp_path / f"{i}.txt")
        files[-1].write_bytes(data)
    threads = lmcore.num_threads()
    try:
        results = []
        for n, order in [(1, files), (2, files), (3, files[::-1])]:
            lmcore.set_num_threads(n)
            results.append(lmcore.Tokenizer.train([str(f) for f in order], vocab_size=2000).to_json())
        assert results[0] == results[1] == results[2]
    finally:
        lmcore.set_num_threads(threads)


# ---- files and errors ----

def test_malformed_tokenizer_json(trained, tmp_path):
    _, j = trained["gpt2"]
    cases = [
        (lambda j: j["model"].update(type="Unigram"), "model type 'Unigram' is not supported"),
        (lambda j: j["model"].update(type="WordPiece"), "model type 'WordPiece' is not supported"),
        (lambda j: j["model"].pop("merges"), "model has no 'merges'"),
        (lambda j: j["model"]["merges"].reverse(), "ranks out of order"),
        (lambda j: j["model"]["merges"].__setitem__(5, "Ġ zzzz"), "merge 5 'Ġ zzzz': 'zzzz' is not in the vocabulary"),
        (lambda j: j["model"]["vocab"].update({"zzzz": 7}), "both have id 7"),
    ]
    for change, message in cases:
        bad = json.loads(json.dumps(j))
        change(bad)
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(lmcore.Error, match=regex.escape(message)):
            lmcore.Tokenizer.from_file(str(path))


def test_gpt2_files(trained, tmp_path):
    tok, _ = trained["gpt2"]
    tok.save_gpt2(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    lines = (tmp_path / "merges.txt").read_text().splitlines()
    assert lines[0] == "#version: 0.2" and len(lines) == 1 + tok.num_merges
    again = lmcore.Tokenizer.from_gpt2_files(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    assert again.encode("Hello <|endoftext|> world", allow_special=True) == \
        tok.encode("Hello <|endoftext|> world", allow_special=True)


def read_shard(path):
    raw = pathlib.Path(path).read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert header[0] == 20240520 and header[1] == 1, header[:3]
    tokens = np.frombuffer(raw[1024:], dtype="<u2")
    assert len(tokens) == header[2]
    return tokens.tolist()


def test_cli_train_tokenize_encode_decode(corpus, tmp_path):
    files = []
    for i, (_, data) in enumerate(corpus[:20]):
        files.append(str(tmp_path / f"doc{i:02d}.txt"))
        pathlib.Path(files[-1]).write_bytes(data)
    tj = str(tmp_path / "tok.json")
    r = run_cli("tokenizer", "train", "--vocab-size", "1200", "--out", tj, "--quiet", *files)
    assert r.returncode == 0, r.stderr
    tok = lmcore.Tokenizer.from_file(tj)
    assert tok.vocab_size == 1200 and tok.end_of_text_id == 1199
    out = tmp_path / "shards"
    r = run_cli("tokenize", "--tokenizer", tj, "--out-dir", out, "--val-fraction", "0.2", "--shard-tokens", "50000",
                "--quiet", *files)
    assert r.returncode == 0, r.stderr
    train = sorted(out.glob("train_*.bin"))
    val = sorted(out.glob("val_*.bin"))
    assert len(train) >= 2 and len(val) >= 1 and (out / "tokenizer.json").is_file()
    train_ids = sum((read_shard(p) for p in train), [])
    val_ids = sum((read_shard(p) for p in val), [])
    assert all(len(read_shard(p)) == 50000 for p in train[:-1])
    eot = tok.end_of_text_id
    docs = [pathlib.Path(f).read_bytes() for f in files]
    expected = [[eot] + tok.encode(d) for d in docs]
    got_train, got_val = [], []
    for seq in expected:  # each document went whole to one split, in file order
        if train_ids[len(got_train):len(got_train) + len(seq)] == seq:
            got_train += seq
        else:
            assert val_ids[len(got_val):len(got_val) + len(seq)] == seq
            got_val += seq
    assert got_train == train_ids and got_val == val_ids and got_val
    # The shards are refused a second time into the same folder.
    r = run_cli("tokenize", "--tokenizer", tj, "--out-dir", out, "--quiet", *files, check=False)
    assert r.returncode == 1 and "already holds token shards" in r.stderr
    # A document given twice (same name, another spelling, a hard link) is refused before anything is
    # written: its copies could land in both splits, and validation would score training text.
    linked = tmp_path / "linked.txt"
    os.link(files[3], linked)
    for twice, shown in (([files[3], files[3]], files[3]), ([files[3], str(tmp_path / "." / "doc03.txt")], files[3]),
                         ([files[3], str(linked)], files[3])):
        out2 = tmp_path / "twice"
        r = run_cli("tokenize", "--tokenizer", tj, "--out-dir", out2, "--quiet", files[0], *twice, check=False)
        assert r.returncode == 1, r.stderr
        assert f"'{twice[1]}' (file 3) is the same file as '{shown}' (file 2)" in r.stderr, r.stderr
        assert not out2.exists()
    # encode / decode on standard input: decode writes the exact bytes, nothing added.
    import subprocess
    from io_helpers import CLI
    data = docs[0][:5000] + b"\xff\xfe tail <|endoftext|>"
    enc = subprocess.run([str(CLI), "tokenizer", "encode", "--tokenizer", tj], input=data, capture_output=True,
                         check=True)
    ids = [int(x) for x in enc.stdout.split()]
    assert ids == tok.encode(data)
    dec = subprocess.run([str(CLI), "tokenizer", "decode", "--tokenizer", tj], input=enc.stdout, capture_output=True,
                         check=True)
    assert dec.stdout == data
    bad = subprocess.run([str(CLI), "tokenizer", "decode", "--tokenizer", tj], input=b"1 2 x3", capture_output=True)
    assert bad.returncode == 1 and b"found 'x3'" in bad.stderr
    usage = run_cli("tokenizer", "train", "--out", tj, check=False)
    assert usage.returncode == 2
    # An --out whose folder does not exist is refused before the training, with the folder named.
    r = run_cli("tokenizer", "train", "--vocab-size", "1200", "--out", tmp_path / "no" / "tok.json", *files,
                check=False)
    assert r.returncode == 1 and f"its directory '{tmp_path / 'no'}': No such file or directory" in r.stderr
    assert "tokenizer train: count" not in r.stderr  # no progress line: nothing was trained
    assert run_cli("tokenizer", "--help").returncode == 0


def test_tokenize_feeds_train_and_generate_decodes(corpus, tmp_path):
    """lmcore tokenizer train -> lmcore tokenize -> lmcore train (a few steps of a tiny model) ->
    lmcore generate, which reads the tokenizer.json the checkpoint carries."""
    import subprocess
    from io_helpers import CLI
    files = []
    for i, (_, data) in enumerate(corpus[:8]):
        files.append(str(tmp_path / f"doc{i}.txt"))
        pathlib.Path(files[-1]).write_bytes(data)
    tj = tmp_path / "tok.json"
    assert run_cli("tokenizer", "train", "--vocab-size", "700", "--out", tj, "--quiet", *files).returncode == 0
    tok = lmcore.Tokenizer.from_file(str(tj))
    data = tmp_path / "data"
    assert run_cli("tokenize", "--tokenizer", tj, "--out-dir", data, "--quiet", *files).returncode == 0
    config = {"vocab_size": 704, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "eos_token_id": tok.end_of_text_id, "bos_token_id": tok.end_of_text_id}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = tmp_path / "run"
    r = run_cli("train", "--data", data / "train_*.bin", "--config", tmp_path / "config.json", "--max-steps", "4",
                "--batch-size", "2", "--seq-len", "32", "--out", run, "--quiet", check=False)
    assert r.returncode == 0, r.stderr
    ckpts = [p for p in run.rglob("tokenizer.json")]
    assert ckpts and ckpts[0].read_text() == (data / "tokenizer.json").read_text()
    g = subprocess.run([str(CLI), "generate", "--checkpoint", str(run), "--prompt", "def main", "--max-tokens", "20",
                        "--temperature", "0"], capture_output=True, check=True)
    assert g.stdout.startswith(b"def main")
    ids = " ".join(str(i) for i in [tok.end_of_text_id] + tok.encode("def main"))
    h = subprocess.run([str(CLI), "generate", "--checkpoint", str(run), "--prompt-ids", ids, "--max-tokens", "20",
                        "--temperature", "0"], capture_output=True, check=True)
    assert g.stdout == b"def main" + h.stdout  # the same ids, decoded the same way
    assert h.stdout != b"\n" and not h.stdout.strip().replace(b" ", b"").isdigit()  # text, not ids
