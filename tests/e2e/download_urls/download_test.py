#!/usr/bin/env python3
"""download_urls end to end against loopback servers (tests/e2e/download_urls/server.py).

  download_test.py SOURCE_DIR BIN_DIR

Checks: every fault mode's meta line (reason, status, attempts); the output in input
order and identical for 1 and 256 connections; kill -9 (and SIGINT) then the same command
equals an uninterrupted run; 10,000 URLs on one host never exceed --per-host at the
server; --host-delay spaces requests; TLS with a test certificate (--ca-file) and without
it; IPv6 loopback; the WARC is read by warcio and --from-warc gives the same raw.json.
Nothing leaves 127.0.0.1 / ::1.
"""
import json, os, signal, subprocess, sys, tempfile, time, urllib.request

SRC, BIN = sys.argv[1], sys.argv[2]
TOOL = os.path.join(BIN, "download_urls")
SERVER = os.path.join(SRC, "tests/e2e/download_urls/server.py")
W = tempfile.mkdtemp(prefix="dl_test_")
procs = []


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def start_server(*args):
    port_file = os.path.join(W, "port-%d" % len(procs))
    p = subprocess.Popen([sys.executable, SERVER, "--port-file", port_file, *args])
    procs.append(p)
    for _ in range(200):
        if os.path.exists(port_file):
            return int(open(port_file).read())
        time.sleep(0.05)
    fail("server did not start: %s" % (args,))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def run(urls, out, *flags, expect=0, name="urls.txt"):
    path = os.path.join(W, name)
    with open(path, "w") as f:
        f.write("".join(u + "\n" for u in urls))
    cmd = [TOOL, path, "--output", out, "--no-progress", "-q", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        fail("%s: exit %d (want %d)\n%s" % (" ".join(cmd), r.returncode, expect, r.stderr))
    return r


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f]


try:
    port = start_server()
    base = "http://127.0.0.1:%d" % port
    # ---- 1. fault modes ----
    cases = [  # path, reason, status, attempts (None: any)
        ("/page/1", "ok", 200, 1), ("/redirect", "ok", 200, 1), ("/gzip", "ok", 200, 1),
        ("/zstd", "ok", 200, 1), ("/br", "ok", 200, 1),
        ("/slow", "timeout", 0, 2), ("/stall", "timeout", 200, 2), ("/404", "http_status", 404, 1),
        ("/flaky/a", "ok", 200, 2), ("/ratelimit/a", "ok", 200, 2), ("/always500", "http_status", 503, 2),
        ("/loop", "too_many_redirects", 302, 1), ("/to-file", "bad_redirect", 302, 1),
        ("/big", "too_large", 200, 1), ("/bomb", "too_large", 200, 1), ("/wrong-charset", "ok", 200, 1),
        ("/meta-charset", "ok", 200, 1), ("/invalid-utf8", "ok", 200, 1), ("/binary", "not_html", 200, 1),
        ("/pdf", "not_html", 200, 1), ("/plain", "ok", 200, 1), ("/empty", "empty", 200, 1),
        ("/reset", "connection", None, 2), ("/bad-ctype", "ok", 200, 1),
    ]
    urls = [base + c[0] for c in cases] + ["ftp://127.0.0.1/x", "http://127.0.0.1:1/refused"]
    want = [(c[1], c[2], c[3]) for c in cases] + [("bad_url", 0, 0), ("refused", 0, 1)]
    out, meta = os.path.join(W, "faults.json"), os.path.join(W, "faults.meta")
    t0 = time.time()
    run(urls, out, "--meta-out", meta, "--timeout", "2", "--low-speed-time", "1", "--retries", "1",
        "--retry-delay", "0.2", "--max-bytes", "2000000", "--n_procs", "16")
    took = time.time() - t0
    got = lines(meta)
    if [m["url"] for m in got] != urls:
        fail("meta lines not in input order")
    for m, (reason, status, attempts) in zip(got, want):
        if m["reason"] != reason or (status is not None and m["status"] != status) or \
                (attempts is not None and m["attempts"] != attempts):
            fail("%s: got %s/%s/%s, want %s/%s/%s" % (m["url"], m["reason"], m["status"], m["attempts"],
                                                      reason, status, attempts))
    ratelimit = next(m for m in got if m["url"].endswith("/ratelimit/a"))
    if ratelimit["seconds"] < 0.9:
        fail("Retry-After: 1 not honoured (%.2f s)" % ratelimit["seconds"])
    if next(m for m in got if m["url"].endswith("/redirect"))["final_url"] != base + "/page/5":
        fail("final URL after a redirect")
    texts = {d["url"][len(base):]: d["text"] for d in lines(out)}
    if list(texts) != [c[0] for c in cases if c[1] == "ok"]:
        fail("output pages: %s" % list(texts))
    if "caf\u00e9 cr\u00e8me" not in texts["/wrong-charset"]:
        fail("a page declared UTF-8 in windows-1252: %r" % texts["/wrong-charset"])
    if "\u041f\u0440\u0438\u0432\u0435\u0442" not in texts["/meta-charset"]:
        fail("<meta> charset windows-1251: %r" % texts["/meta-charset"])
    if "\ufffd" not in texts["/invalid-utf8"] or "\u00e9t\u00e9" not in texts["/invalid-utf8"]:
        fail("invalid UTF-8 not replaced: %r" % texts["/invalid-utf8"])
    open(out, encoding="utf-8", errors="strict").read()  # the whole output is valid UTF-8
    bad = next(m for m in got if m["url"].endswith("/bad-ctype"))  # lines() read the meta strictly too
    if bad["content_type"] != "text/html; name=caf\ufffd":
        fail("a Latin-1 Content-Type in the meta file: %r" % bad["content_type"])
    if "Paragraph 0 of article 1," not in texts["/page/1"] or "Copyright" in texts["/page/1"] or \
            "Home" in texts["/page/1"]:
        fail("main text of /page/1: %r" % texts["/page/1"])
    for coding, n in (("/zstd", 12), ("/br", 13)):
        if "Paragraph 0 of article %d," % n not in texts[coding]:
            fail("a %s body: %r" % (coding[1:], texts[coding][:200]))
    if texts["/plain"] != "Just plain text.\nSecond line of it.\n":
        fail("text/plain: %r" % texts["/plain"])
    if os.path.exists(out + ".partial") or os.path.exists(out + ".resume"):
        fail("partial or resume files left after a complete run")
    print("faults ok (%.1f s)" % took)

    # ---- 1b. cookies stay with their URL: a later URL on the same handle does not send them ----
    run([base + "/set-cookie", base + "/echo-cookie"], os.path.join(W, "cookies.json"), "--n_procs", "1")
    echo = lines(os.path.join(W, "cookies.json"))[1]["text"]
    if "SECRET123" in echo or "[none]" not in echo:
        fail("a cookie of one URL was sent with another: %r" % echo)
    print("cookies ok")

    # ---- 2. same output for 1 and 256 connections ----
    urls = [base + "/page/%d" % i for i in range(300)] + [base + p for p in ("/404", "/pdf", "/empty", "/loop")]
    get(base + "/reset-stats")
    run(urls, os.path.join(W, "c1.json"), "--n_procs", "1", "--meta-out", os.path.join(W, "c1.meta"))
    run(urls, os.path.join(W, "c256.json"), "--n_procs", "256", "--per-host", "256",
        "--meta-out", os.path.join(W, "c256.meta"))
    if open(os.path.join(W, "c1.json"), "rb").read() != open(os.path.join(W, "c256.json"), "rb").read():
        fail("output differs between 1 and 256 connections")
    strip = lambda p: [{k: v for k, v in m.items() if k != "seconds"} for m in lines(p)]
    if strip(os.path.join(W, "c1.meta")) != strip(os.path.join(W, "c256.meta")):
        fail("meta differs between 1 and 256 connections")
    if len(lines(os.path.join(W, "c1.json"))) != 300:
        fail("pages with text: %d" % len(lines(os.path.join(W, "c1.json"))))
    print("1 vs 256 connections ok")

    # ---- 3. kill -9 / SIGINT, then resume ----
    urls = [base + "/busy/%d" % i for i in range(3000)]
    full = os.path.join(W, "full.json")
    run(urls, full, "--n_procs", "4", "--warc-out", os.path.join(W, "full.warc.gz"), name="resume-urls.txt")
    for sig in (signal.SIGKILL, signal.SIGINT):
        part = os.path.join(W, "part-%d.json" % sig)
        warc = os.path.join(W, "part-%d.warc.gz" % sig)
        cmd = [TOOL, os.path.join(W, "resume-urls.txt"), "--output", part, "--n_procs", "2", "--per-host", "2",
               "--checkpoint-sec", "0.2", "--warc-out", warc, "--meta-out", part + ".meta", "--no-progress", "-q"]
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE)
        time.sleep(1.5)
        p.send_signal(sig)
        rc = p.wait()
        if os.path.exists(part):
            fail("the final output exists after an interruption")
        if not os.path.exists(part + ".resume"):
            fail("no resume state after signal %d (exit %d)" % (sig, rc))
        if sig == signal.SIGINT and rc != 130:
            fail("SIGINT: exit %d, want 130" % rc)
        done_before = int(open(part + ".resume").read().split("done ")[1].split()[0])
        if not 0 < done_before < 3000:
            fail("signal %d: %d URLs done before the signal; the test wants a run cut half way" % (sig, done_before))
        if sig == signal.SIGKILL:
            # as if it had stopped while renaming its files into place: the meta file already renamed
            os.rename(part + ".meta.partial", part + ".meta")
        r = subprocess.run(cmd[:-1] + ["-v"], capture_output=True, text=True)
        if r.returncode != 0:
            fail("resume after signal %d: exit %d\n%s" % (sig, r.returncode, r.stderr))
        if open(part, "rb").read() != open(full, "rb").read():
            fail("resumed output differs from an uninterrupted run (signal %d)" % sig)
        if [m["url"] for m in lines(part + ".meta")] != urls:
            fail("resumed meta lines (signal %d)" % sig)
        print("signal %d at %d/3000 URLs, resume ok" % (sig, done_before))

    # ---- 4. WARC: warcio reads it; --from-warc gives the same raw.json ----
    from warcio.archiveiterator import ArchiveIterator
    n = 0
    with open(os.path.join(W, "full.warc.gz"), "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                n += 1
                body = rec.content_stream().read()
                if b"Paragraph 0 of article" not in body:
                    fail("warcio: a response body without its page")
    if n != 3000:
        fail("warcio read %d response records, want 3000" % n)
    rewarc = os.path.join(W, "rewarc.json")
    r = subprocess.run([TOOL, "--from-warc", os.path.join(W, "full.warc.gz"), "--output", rewarc, "-q",
                        "--no-progress"], capture_output=True, text=True)
    if r.returncode != 0 or open(rewarc, "rb").read() != open(full, "rb").read():
        fail("--from-warc output differs from the fetched one\n" + r.stderr)
    print("WARC ok")

    # ---- 5. 10,000 URLs on one host: the per-host cap holds at the server ----
    busy = "http://127.0.0.1:%d" % start_server()  # a server of its own: no slow handler of case 1 counts
    urls = [busy + "/busy/%d" % i for i in range(10000)]
    t0 = time.time()
    run(urls, os.path.join(W, "busy.json"), "--n_procs", "256", "--per-host", "3")
    stats = json.loads(get(busy + "/stats"))
    if stats["max_active"] > 3 or stats["max_connections"] > 3:
        fail("per-host cap 3 exceeded: %s" % stats)
    if stats["requests"] < 10000 or len(lines(os.path.join(W, "busy.json"))) != 10000:
        fail("10,000 URLs: %s" % stats)
    print("10,000 URLs, per-host 3: server saw at most %d requests and %d connections at once (%.1f s)"
          % (stats["max_active"], stats["max_connections"], time.time() - t0))

    # ---- 6. --host-delay ----
    t0 = time.time()
    run([base + "/page/%d" % i for i in range(6)], os.path.join(W, "delay.json"), "--host-delay", "0.3")
    if time.time() - t0 < 1.5:
        fail("--host-delay 0.3 over 6 URLs took %.2f s" % (time.time() - t0))
    print("host delay ok")

    # ---- 7. TLS with a test certificate; IPv6 loopback ----
    cert, key = os.path.join(W, "cert.pem"), os.path.join(W, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    tls_port = start_server("--tls", cert, key)
    tls_urls = ["https://127.0.0.1:%d/page/7" % tls_port, "https://localhost:%d/page/8" % tls_port]
    run(tls_urls, os.path.join(W, "tls.json"), "--ca-file", cert, "--meta-out", os.path.join(W, "tls.meta"))
    if [m["reason"] for m in lines(os.path.join(W, "tls.meta"))] != ["ok", "ok"]:
        fail("TLS with --ca-file: %s" % lines(os.path.join(W, "tls.meta")))
    run(tls_urls[:1], os.path.join(W, "tls2.json"), "--meta-out", os.path.join(W, "tls2.meta"))
    if lines(os.path.join(W, "tls2.meta"))[0]["reason"] != "tls":
        fail("an untrusted certificate: %s" % lines(os.path.join(W, "tls2.meta")))
    print("TLS ok")
    import socket
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
        have_v6 = True
    except OSError:
        have_v6 = False
    if have_v6:
        v6 = start_server("--ipv6")
        run(["http://[::1]:%d/page/9" % v6], os.path.join(W, "v6.json"), "--meta-out", os.path.join(W, "v6.meta"))
        if lines(os.path.join(W, "v6.meta"))[0]["reason"] != "ok":
            fail("IPv6 loopback: %s" % lines(os.path.join(W, "v6.meta")))
        print("IPv6 ok")
    elif os.environ.get("CI"):
        fail("no IPv6 loopback on this machine (the IPv6 case cannot run)")
    else:
        print("IPv6 loopback unavailable here: case not run")

    # ---- 8. usage errors ----
    r = subprocess.run([TOOL, "--output", os.path.join(W, "x.json")], capture_output=True, text=True)
    if r.returncode != 2 or "URL file or --from-warc" not in r.stderr:
        fail("no input: exit %d %s" % (r.returncode, r.stderr))
    open(os.path.join(W, "x.json.resume"), "w").write("zerolm download_urls resume 1\n")
    r = subprocess.run([TOOL, "--from-warc", os.path.join(W, "full.warc.gz"), "--output", os.path.join(W, "x.json")],
                       capture_output=True, text=True)
    if r.returncode != 2 or "interrupted download" not in r.stderr:
        fail("--from-warc over an interrupted download's output: exit %d %s" % (r.returncode, r.stderr))
    print("download_urls e2e ok")
finally:
    for p in procs:
        p.kill()
    subprocess.run(["rm", "-rf", W])
