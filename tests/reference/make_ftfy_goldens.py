"""Golden outputs of ftfy.fix_text (default configuration) for
tests/unit/text_fix_test.cpp: tests/data/ftfy/golden.jsonl, {"in": ..., "out": ...}.

Inputs (deterministic, >= 2000):
  * real text: lines of the OpenWebText fixture that contain non-ASCII characters;
  * mojibake made from those lines: UTF-8 bytes decoded as windows-1252, latin-1,
    windows-1251, windows-1250, iso-8859-2, macroman or cp437, one or two layers,
    sometimes only part of the line (inconsistent mojibake);
  * constructed cases: HTML entities (named, numeric, invalid, inside '<' text),
    C1 controls, ligatures, fullwidth forms, curly quotes, line breaks, control
    characters, terminal escapes, decomposed accents, lossy sequences.
Rerun: .venv/bin/python tests/reference/make_ftfy_goldens.py
"""
import json
import os
import random

import ftfy

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
rng = random.Random(20261122)

lines = []
for raw in open(os.path.join(DATA, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8"):
    for line in json.loads(raw)["text"].split("\n"):
        if any(ord(c) > 127 for c in line) and 10 < len(line) < 400:
            lines.append(line)
rng.shuffle(lines)

cases = []
cases += lines[:700]

ENCODINGS = ["windows-1252", "latin-1", "windows-1251", "windows-1250", "iso-8859-2", "mac_roman", "cp437"]
pool = [l for l in lines if any(0x80 <= ord(c) < 0x3000 for c in l)] or lines
made = 0
i = 0
while made < 900 and i < 20000:
    line = pool[i % len(pool)]
    i += 1
    enc = rng.choice(ENCODINGS)
    try:
        if rng.random() < 0.2:  # only the end of the line garbled (inconsistent mojibake)
            cut = rng.randrange(len(line))
            bad = line[:cut] + line[cut:].encode("utf-8").decode(enc)
        else:
            bad = line.encode("utf-8").decode(enc)
            if rng.random() < 0.25:  # a second layer
                bad = bad.encode("utf-8").decode(rng.choice(ENCODINGS[:3]))
    except UnicodeDecodeError:
        continue
    cases.append(bad)
    made += 1

# Short mojibake of common characters and words.
words = ["café", "naïve", "résumé", "Zürich", "São Paulo", "Ελληνικά", "Русский", "Łódź", "niño", "“quoted”",
         "it’s", "—", "…", "€100", "©2019", "°C", "½", "東京", "😀", "à la carte", "façade", "Ångström", "ĳ", "ß"]
for w in words:
    for enc in ENCODINGS:
        try:
            cases.append(w.encode("utf-8").decode(enc))
            cases.append("The word " + w.encode("utf-8").decode(enc) + " appears here.")
        except UnicodeDecodeError:
            pass

constructed = [
    "Broken text&hellip; it&#x2019;s ﬂubberiﬁc!", "&lt;tag&gt; &amp; &quot;x&quot;", "<p>&amp; stays</p>", "&AMP; &LT;",
    "&#65;&#x42;&#0;&#x80;&#xD800;&#1114112;", "&notanentity; &amp", "x &nbsp; y", "&#x1F600;", "ＬＯＵＤ　ＮＯＩＳＥＳ",
    "\x80\x93 quoted \x94", "ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ĳ ǆ", "“double” ‘single’ ‟odd‛", "a\r\nb\rc\u2028d\u2029e\x85f",
    "ctrl\x00\x01\x07\x0b\x0e\x1f\x7f chars", "\x1b[31mred\x1b[0m text", "\ufeffBOM at start", "e\u0301 a\u0300 o\u0308",
    "sÃ³", "voilÃ le travail", "Ã  la", "Ã quele", "Ã s ", "doesnÃ¢â‚¬â„¢t", "âœ” No problems", "Ã¢â‚¬Å“quotesÃ¢â‚¬Â",
    "\u0080\u0081\u009f", "l’été", "Ð¿Ñ€Ð¸Ð²ÐµÑ‚", "ÐŸÑ€Ð¸Ð²ÐµÑ‚", "Ã§Ã£o", "Ã©tÃ©", "Â£100", "Â\xa0Â\xa0", "â€“ dash",
    "Ã\xa0 bientôt", "cafÃ\x83Â©", "&macr;\\_(ã\x83\x84)_/&macr;", "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u02bc",
    "Ã¼ber", "\xef\xbb\xbfthe", "ï»¿the", "Ã¶Ã¤Ã¼", "Ã–Ã„Ãœ", "×©×œ×•×", "Ø§Ù„Ø¹Ø±Ø¨ÙŠØ©", "æ—¥æœ¬èªž", "í•œêµ­ì–´",
    "Î•Î»Î»Î·Î½Î¹ÎºÎ¬", "Ã?", "Ã\x1a", "â€?", "test ï¿½ replacement", "ÃƒÂ©", "ÃƒÆ’Ã‚Â©", "\x1a", "x\x1ay",
    "It was the â€˜bestâ€™ of times", "Ã¢â€žÂ¢", "mÃ¶glich", "peÃ±a", "HÃ¤agen-Dazs", "â†’ arrow", "Â·", "Ã—",
    "ÐÐ°Ñ‡Ð°Ð»Ð¾", "Ð\xa0ÑƒÑÑÐºÐ¸Ð¹", "pÃ¢tÃ©", "Ã‰cole", "â€¦ and more", "donâ€™t", "Iâ€™m", "â€œHiâ€\x9d",
]
cases += constructed
for c in constructed:
    cases.append("Line one\n" + c + "\nLine three")
    cases.append(c + " " + rng.choice(lines[:50]))

seen, out = set(), []
for c in cases:
    if c in seen:
        continue
    seen.add(c)
    out.append({"in": c, "out": ftfy.fix_text(c)})
with open(os.path.join(DATA, "ftfy", "golden.jsonl"), "w", encoding="utf-8") as f:
    for rec in out:
        f.write(json.dumps(rec, ensure_ascii=True) + "\n")
changed = sum(r["in"] != r["out"] for r in out)
print(f"{len(out)} cases, {changed} changed by ftfy {ftfy.__version__}")
