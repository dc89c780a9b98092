#!/usr/bin/python3
"""Writes the seed corpora of the text fuzz targets (tests/text/fuzz/corpus/<target>/): small tokenizer.json
files that lmcore trains here (GPT-2 and Llama 3 layouts, added tokens that strip, ignore_merges), a few
malformed ones, and texts / id lists for the decode target. Run from the repo root with the module built
(LMCORE_BUILD_DIR or build/release); the outputs are committed, so this only needs rerunning to change them."""
import json
import os
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(pathlib.Path(os.environ.get("LMCORE_BUILD_DIR", ROOT / "build" / "release")) / "python"))
import lmcore  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent / "corpus"
TEXTS = [b"Hello world, it's a test of the tokenizer.\n\n  Indented code: x = 12345\n",
         "Caf\u00e9 \u65e5\u672c\u8a9e \u0627\u0644\u0633\u0644\u0627\u0645 \U0001F600 e\u0301".encode(),
         b"the the the then there these those <|endoftext|> \xff\xfe"] * 3


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def main():
    gpt2 = lmcore.Tokenizer.train(texts=TEXTS, vocab_size=300, special_tokens=["<|endoftext|>"])
    llama = lmcore.Tokenizer.train(texts=TEXTS, vocab_size=290, special_tokens=["<|begin_of_text|>"], pattern="llama3")
    put("fuzz_tokenizer_json", "gpt2.json", gpt2.to_json())
    put("fuzz_tokenizer_json", "llama3.json", llama.to_json())
    j = json.loads(gpt2.to_json())
    j["added_tokens"].append({"id": 300, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": True,
                              "normalized": False, "special": True})
    j["pre_tokenizer"]["add_prefix_space"] = True
    put("fuzz_tokenizer_json", "strip.json", json.dumps(j))
    j = json.loads(llama.to_json())
    j["model"]["ignore_merges"] = True
    j["model"]["merges"] = [m.split(" ") for m in j["model"]["merges"]]
    put("fuzz_tokenizer_json", "ignore_merges.json", json.dumps(j, ensure_ascii=False))
    j = json.loads(gpt2.to_json())
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\d+|[a-z]+|\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "."}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    put("fuzz_tokenizer_json", "splits.json", json.dumps(j))
    j = json.loads(gpt2.to_json())
    j["model"]["merges"] = list(reversed(j["model"]["merges"]))
    put("fuzz_tokenizer_json", "out_of_order.json", json.dumps(j))
    j["model"]["type"] = "Unigram"
    put("fuzz_tokenizer_json", "unigram.json", json.dumps(j))
    put("fuzz_tokenizer_json", "truncated.json", gpt2.to_json()[:3000])
    for i, t in enumerate(TEXTS[:3]):
        put("fuzz_tokenizer_decode", f"text{i}", b"\x01" + t)
        put("fuzz_tokenizer_decode", f"ids{i}", b"\x00" + b"".join(struct.pack("<H", x) for x in gpt2.encode(t)))
    put("fuzz_tokenizer_decode", "special", b"\x03a<|endoftext|>b<s>lmcore\n\nx")


if __name__ == "__main__":
    main()
