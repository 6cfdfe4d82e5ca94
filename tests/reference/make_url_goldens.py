"""Golden verdicts for blacklist_urls from Megatron's own logic (tldextract +
Python `re` with Megatron's URL regex), for tests/unit/url_filter_test.cpp.

Input tests/data/urls/urls.txt (one URL per line, edge cases); output
tests/data/urls/golden.tsv: url, tldextract domain, regex full match (0/1),
Megatron's verdict, and zerolm's verdict (Megatron's with our two documented
fixes: the domain label compared lower-cased, and ".7z" blocked / ".ai" not an
extension instead of the fused ".7z.ai"). tldextract runs offline on its bundled
public suffix snapshot. Rerun: .venv/bin/python tests/reference/make_url_goldens.py
"""
import os
import re

import tldextract

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "urls")

DOMAINS = set("""500px aapks akamaihd amazon apple artifactfire artstation awwni bandcamp battleforthenet coinscalendar
dailymotion deviantart discord discordapp dlapkandroid dropbox e621 ebay edealinfo erome eroshare explosm facebook fbcdn
flickr furaffinity futhead gatopardo gfycat gifsound gifsoup giphy github google gunprime gyazo horsefucker hotdealstar
imagefap imageshack imgflip imgur instagram karmadecay kryptocal kym-cdn liveleak livememe lmgtfy magaimg memegenerator
minorplanetcenter minus mobafire morejpeg nocookie pcpartpicker photobucket pinimg pinterest pixiv pornhub prntscr puu
qkme quickmeme radd redd reddit reddit-stream redditlog redditmedia reddituploads redtube reupp reverb roanoke
rollingstone sli soundcloud soundgasm spankbang spotify strawpoll streamable timeanddate tinypic touhouradio tumblr
twimg twitch twitter vid vimeo vine vkaao vocaroo voyagefusion walmart wciu wikimedia wikipedia xhamster xkcd xvideos
youtu youtube youtubedoubler ytimg zillexplorer""".split())
EXTS_MEGATRON = """.3gp .7z.ai .aif .apk .app .avi .bin .bmp .bz2 .css .csv .dat .deb .dmg .doc .docx .exe .gif .gifv .gz
.iso .jar .jpeg .jpg .js .log .mid .midi .mkv .mov .mp3 .mp4 .mpeg .mpg .ogg .ogv .otf .pdf .pkg .png .pps .ppt .pptx
.psd .py .qt .ram .rar .sql .svg .swf .tar.gz .tar .tgz .tiff .ttf .txt .wav .webm .wma .wmv .xls .xlsx .xml .xz
.zip""".split()
EXTS_ZEROLM = [".7z" if e == ".7z.ai" else e for e in EXTS_MEGATRON]
URL_RE = re.compile(
    r"^(?:http)s?://"
    r"(?:(?:[A-Z0-9](?:[A-Z0-9-]{0,61}[A-Z0-9])?\.)+(?:[A-Z]{2,6}\.?|[A-Z0-9-]{2,}\.?)|"
    r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})"
    r"(?::\d+)?"
    r"(?:/?|[/?]\S+)$", re.IGNORECASE)
extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def verdict(url, domain, exts):
    if domain in DOMAINS:
        return "domain_blacklist"
    path = url.split("?")[0].lower()
    if any(path.endswith(e) for e in exts):
        return "extension_blacklist"
    if len(url) <= 8:
        return "short"
    if not URL_RE.match(url):
        return "malformed"
    return "accepted"


def verdict_with(url, domains, exts, lower_domain):
    """verdict() with another domain list: Megatron's logic, or zerolm's two fixes (lower_domain)."""
    domain = extract(url).domain
    if lower_domain:
        domain = domain.lower()
    if domain in domains:
        return "domain_blacklist"
    return verdict(url, "", exts)


if __name__ == "__main__":
    with open(os.path.join(DATA, "urls.txt"), encoding="utf-8") as f, \
            open(os.path.join(DATA, "golden.tsv"), "w", encoding="utf-8") as out:
        for line in f:
            url = line.strip()
            domain = extract(url).domain
            match = 1 if URL_RE.match(url) else 0
            out.write(f"{url}\t{domain.lower()}\t{match}\t{verdict(url, domain, EXTS_MEGATRON)}\t"
                      f"{verdict(url, domain.lower(), EXTS_ZEROLM)}\n")
