"""Python baseline for bench_blacklist.sh: Megatron's blacklist_urls.py logic
(tldextract domain, extension suffixes, length, the URL regex, a set for
duplicates) over one URL file, one process. Also makes the synthetic input.
  baseline_blacklist.py make OUT N        # N seeded synthetic URLs
  baseline_blacklist.py run IN OUT        # prints "seconds urls accepted"; OUT: the
                                          # accepted URLs, sorted (written after timing)
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))

if sys.argv[1] == "make":
    out, n = sys.argv[2], int(sys.argv[3])
    rng = random.Random(1234)
    hosts = [f"www.site{i}.com" for i in range(3000)] + ["www.youtube.com", "i.redd.it", "news.bbc.co.uk",
                                                         "en.wikipedia.org", "blog.example.org", "x.ai", "imgur.com"]
    exts = ["", "", "", ".html", ".php", ".jpg", ".pdf", "/"]
    with open(out, "w") as f:
        for i in range(n):
            h = rng.choice(hosts)
            kind = rng.random()
            if kind < 0.02:
                f.write("short\n")
            elif kind < 0.04:
                f.write(f"htp://{h}/broken path\n")
            else:
                f.write(f"https://{h}/{rng.randrange(10**6)}/article-{rng.randrange(10**4)}{rng.choice(exts)}"
                        f"{'?ref=' + str(rng.randrange(100)) if rng.random() < 0.3 else ''}\n")
    sys.exit(0)

import re  # noqa: E402

import tldextract  # noqa: E402
from make_url_goldens import DOMAINS, EXTS_MEGATRON, URL_RE  # noqa: E402

extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
t0 = time.perf_counter()
seen = set()
n = 0
for line in open(sys.argv[2], encoding="utf-8"):
    url = line.strip()
    n += 1
    if extract(url).domain in DOMAINS:
        continue
    path = url.split("?")[0].lower()
    if any(path.endswith(e) for e in EXTS_MEGATRON):
        continue
    if len(url) <= 8 or not URL_RE.match(url) or url in seen:
        continue
    seen.add(url)
seconds = time.perf_counter() - t0
with open(sys.argv[3], "w", encoding="utf-8") as f:
    f.writelines(u + "\n" for u in sorted(seen))
print(f"{seconds:.3f} {n} {len(seen)}")
