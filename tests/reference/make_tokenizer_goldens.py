"""Golden GPT-2 token ids from the reference tokenizers, for tests/unit/gpt2_bpe_test.cpp.

Both references are loaded from the same vocab.json/merges.txt we ship:
  * tiktoken: an Encoding with GPT-2's pattern (tiktoken_ext r50k_pat_str) and
    mergeable ranks {token bytes: id} (GPT-2's ids are in merge order);
    encode_ordinary, so "<|endoftext|>" in text is ordinary text, as in Megatron.
  * Hugging Face tokenizers: BPE.from_file + ByteLevel pre-tokenizer
    (add_prefix_space=False), no special tokens.
The script fails if the two disagree on any input, then writes:
  tests/data/tokenizer/stress.jsonl        {"text", "ids_gpt2", "ids_tiny"} per edge case
  tests/data/tokenizer/owt_hashes.txt      per OpenWebText fixture document: count and
                                           FNV-1a-64 of the little-endian int32 ids (full GPT-2 vocab)
Rerun: .venv/bin/python tests/reference/make_tokenizer_goldens.py
"""
import json
import os
import sys

import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def byte_decoder():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def load(vocab, merges):
    dec = byte_decoder()
    enc = json.load(open(vocab, encoding="utf-8"))
    ranks = {}
    for tok, i in enc.items():
        if tok == "<|endoftext|>":
            continue
        ranks[bytes(dec[ch] for ch in tok)] = i
    tk = tiktoken.Encoding(name="gpt2-files", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={})
    hf = Tokenizer(BPE.from_file(vocab, merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    return tk, hf


def encode_both(tk, hf, text, what):
    a = tk.encode_ordinary(text)
    b = hf.encode(text, add_special_tokens=False).ids
    if a != b:
        sys.exit(f"references disagree on {what}: {text[:80]!r}\n tiktoken {a[:40]}\n hf       {b[:40]}")
    return a


STRESS = [
    "", "Hello world", " Hello world", "Hello  world\n\nNew paragraph.", "I'm can't they'LL 12345 3.14",
    "naïve café 東京 😀", "<|endoftext|>", "a<|endoftext|>b <|endoftext|> end", "   ", "a\tb\r\nc", "It's 2019-11-07!",
    "spaces   between    words     ", "\n\n\n", "\n \n \n", " \t \t", "line\n\n\n\nbreaks", "trailing space ",
    "  leading", "tabs\t\t\tinside", "\u00a0nbsp\u00a0and\u202fnarrow\u2009thin\u3000ideographic", "\u2028\u2029sep",
    "\x1c\x1d\x1e\x1fcontrols\x0b\x0c\x85", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "'Re 'rE 'lL",
    "don't won't I'll you're we've she'd he's", "rock'n'roll 'quoted' ''double''", "''''", "x'", "'",
    "0123456789 000 1,000,000 3.14159 -42 +7 1e10 ½ ² Ⅻ ٣٤ ४२", "2024-01-01T12:00:00Z",
    "!!! ??? ... --- *** ### $$$ %%% &&& @@@", "(a) [b] {c} <d> |e| \\f/", "a.b,c;d:e!f?g",
    "emoji 😀😃😄 family 👨‍👩‍👧‍👦 flag 🇺🇸 skin 👍🏽 keycap 1️⃣", "❤️ ✨ 🔥🔥🔥",
    "中文文本，包含标点。日本語のテキスト、カタカナ。한국어 텍스트입니다.", "العربية نص مع أرقام ١٢٣ and English",
    "עברית שלום", "Ελληνικά κείμενο", "Русский текст, ёлки-палки!", "हिन्दी पाठ", "ภาษาไทย",
    "e\u0301 a\u0300 combining\u0308 marks\u0327 ñ", "Z\u0351\u0325a\u0368\u032bl\u034bg\u0358o", "ﬁ ﬂ ligatures Ａ Ｂ fullwidth",
    "mixed123abc456 a1b2c3 x_y_z snake_case camelCase", "https://example.com/path?q=1&r=two#frag",
    "user@example.com", "C:\\Windows\\System32", "def f(x):\n    return x ** 2\n", "{\"json\": [1, 2, 3]}",
    "a" * 300, "ab" * 200, " " * 100 + "x", "\n" * 50 + "y", "1" * 120, "!" * 150, "😀" * 40,
    "ⅰⅱⅲ", "\U0001F9D1\u200D\U0001F4BB", "\ufeffBOM start", "tab\tand\u000bvt",
]


def fnv64(ids):
    h = 1469598103934665603
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    full = load(os.path.join(DATA, "gpt2", "gpt2-vocab.json"), os.path.join(DATA, "gpt2", "gpt2-merges.txt"))
    tiny = load(os.path.join(DATA, "megatron", "gpt2-tiny-vocab.json"), os.path.join(DATA, "megatron", "gpt2-tiny-merges.txt"))
    out_dir = os.path.join(DATA, "tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "stress.jsonl"), "w", encoding="utf-8") as f:
        for t in STRESS:
            rec = {"text": t, "ids_gpt2": encode_both(*full, t, "stress/gpt2"), "ids_tiny": encode_both(*tiny, t, "stress/tiny")}
            f.write(json.dumps(rec, ensure_ascii=True) + "\n")
    n = 0
    with open(os.path.join(DATA, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8") as src, \
            open(os.path.join(out_dir, "owt_hashes.txt"), "w") as f:
        for line in src:
            ids = encode_both(*full, json.loads(line)["text"], f"owt line {n + 1}")
            f.write(f"{len(ids)} {fnv64(ids):016x}\n")
            n += 1
    print(f"wrote {len(STRESS)} stress cases and {n} OpenWebText hashes", file=sys.stderr)


if __name__ == "__main__":
    main()
