"""test_serve.py: `veloxquant serve` end to end, through the real `openai` client package and raw
sockets. Each case starts the server on a free loopback port (--port 0: it prints the port).

  python test_serve.py BIN stories   stories260K (../shared/data): greedy completions (streamed and
        not) equal `veloxquant generate --temp 0` for f16, q8_0 and q4_0:rotate=1; stop strings;
        prefix reuse; concurrent requests equal the sequential ones; the bad-request list (each a
        4xx JSON error or a clean close, the server still serving); slot save/restore/erase
  python test_serve.py BIN holes     stories260K: issue 31's holes, each a check that failed before
        its fix: specs past 255 characters (the default's whole text, prefix reuse only between equal
        specs), a slow-header flood (a per-client cap and a deadline keep /health served), a slow
        body (cut at the deadline), a ninth connection from one address (refused), calib=
        confined to --calib-dir with one message for every refusal, slot files under a directory
        name, of an evicting cache, with a NUL; a chunked body then a half-close is answered
  python test_serve.py BIN smollm2   SmolLM2 (models/): a streamed chat equals `generate --chat
        --temp 0`; "hello<|im_end|>" in a message stays text; 16 concurrent clients all complete and /metrics returns to zero active slots and
        zero reserved bytes; a client that disconnects mid-stream frees its slot at once; a full
        queue gives 503; SIGTERM finishes the stream in flight and exits 0

Exits 77 (skip) with a message when the openai package, the model or ../shared is absent.
Fixed inputs only (prompts and seeds below); VQ_TEST_SEED overrides the sampling seed."""
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import openai
except ImportError:
    print("skip: the 'openai' package is not installed (run scripts/setup-serve-venv.sh; make setup does)")
    sys.exit(77)

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("VQ_SHARED_DIR", os.path.join(SRC, "..", "shared"))
STORIES = [os.path.join(SHARED, "data", "stories260K.bin"), os.path.join(SHARED, "data", "tok512.bin")]
SMOLLM2 = os.path.join(os.environ.get("VQ_MODELS_DIR", os.path.join(SRC, "models")), "SmolLM2-135M-Instruct.Q4_1.gguf")
SEED = int(os.environ.get("VQ_TEST_SEED", "0"), 0) or 1234
print(f"seed {SEED} (VQ_TEST_SEED overrides)")
SANITIZED = os.environ.get("VQ_SANITIZER_BUILD") == "1"

failures = 0


def open_stream(port, n_events):
    """A raw streamed chat request (a long story) read until n_events SSE events arrived; returns
    the socket, left open (closing it is the disconnect)."""
    body = json.dumps({"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data: ") < n_events:
        got += s.recv(4096)
    return s


def check(cond, what):
    global failures
    if cond:
        print(f"  ok: {what}")
    else:
        failures += 1
        print(f"  FAIL: {what}")
    return cond


class Server:
    def __init__(self, binary, model_args, *extra, env=None):
        self.log = tempfile.TemporaryFile()
        e = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        if env:
            e.update(env)
        self.p = subprocess.Popen([binary, "serve", *model_args, "--host", "127.0.0.1", "--port", "0", *extra],
                                  stdout=subprocess.PIPE, stderr=self.log, env=e)
        line = self.p.stdout.readline().decode()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.p.wait(10)
            self.log.seek(0)
            raise RuntimeError(f"the server did not start: {line!r} {self.log.read().decode()[-2000:]}")
        self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0, timeout=600)

    def request(self, method, path, body=None, headers=None, timeout=600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.status, r.read()
        c.close()
        return out

    def metrics(self):
        st, body = self.request("GET", "/metrics")
        vals = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                vals[k] = float(v)
        return vals

    def wait_idle(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            m = self.metrics()
            if m["veloxquant_slots_active"] == 0 and m["veloxquant_requests_queued"] == 0:
                return m
            time.sleep(0.02)
        return self.metrics()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(120)
        self.log.seek(0)
        return rc, self.log.read().decode()


def cli_generate(binary, model_args, prompt, n, kv="f16", ctx=256, chat=False):
    args = [binary, "generate", *model_args, "-p", prompt, "-n", str(n), "--temp", "0", "-c", str(ctx), "--kv", kv]
    if chat:
        args.append("--chat")
    out = subprocess.run(args, capture_output=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
    text = out.decode("utf-8", errors="replace")
    assert text.endswith("\n")
    text = text[:-1]
    if not chat:
        assert text.startswith(prompt)
        text = text[len(prompt):]
    return text


def error_shape(status, body, want_status=None, want_in=None):
    """A 4xx with {"error": {"message", "type", "param", "code"}}."""
    try:
        e = json.loads(body)["error"]
    except Exception:
        return False
    ok = 400 <= status < 500 and isinstance(e.get("message"), str) and e["message"] and "type" in e \
        and "param" in e and "code" in e
    if want_status is not None:
        ok = ok and status == want_status
    if want_in is not None:
        ok = ok and want_in in e["message"]
    return ok


def raw_exchange(port, data, trickle=0.0, read=True, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if trickle:
        for b in data:
            s.sendall(bytes([b]))
            time.sleep(trickle)
    else:
        s.sendall(data)
    got = b""
    if read:
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
    s.close()
    return got


def stream_completion(client, **kw):
    text, last = "", None
    for ch in client.completions.create(stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].text or ""
            if ch.choices[0].finish_reason:
                last = ch
    return text, last


def case_stories(binary):
    for f in STORIES:
        if not os.path.exists(f):
            print(f"skip: {f} not found (../shared/data)")
            sys.exit(77)
    margs = ["-m", STORIES[0], "--tokenizer", STORIES[1]]
    slot_dir = tempfile.mkdtemp(prefix="vq-slots-")
    srv = Server(binary, margs, "-np", "4", "-c", "256", "--slot-save-path", slot_dir, "--queue", "64",
                 "--idle-timeout", "3")
    cl = srv.client
    try:
        model = cl.models.list().data[0].id
        check(model == "stories260K.bin", f"/v1/models lists the model ({model})")
        prompts = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big"]

        print("greedy output equals `veloxquant generate --temp 0`, per KV spec")
        ref = {}
        for kv in ["f16", "turboquant_mse:k=4,v=4", "f32;window=8"]:
            for p in prompts[:2]:
                want = cli_generate(binary, margs, p, 40, kv)
                ref[(kv, p)] = want
                r = cl.completions.create(model=model, prompt=p, max_tokens=40, temperature=0,
                                          extra_body={"kv": kv})
                check(r.choices[0].text == want, f"{kv} {p!r}: non-streamed text equals the CLI's ({want[:40]!r}...)")
                check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens == 40
                      and r.usage.total_tokens == r.usage.prompt_tokens + 40, f"{kv}: usage {r.usage}")
                check(r.choices[0].finish_reason == "length", "finish_reason length")
                text, last = stream_completion(cl, model=model, prompt=p, max_tokens=40, temperature=0,
                                               extra_body={"kv": kv})
                check(text == want, f"{kv} {p!r}: streamed text equals the CLI's")
                check(last is not None and last.usage is not None and last.usage.completion_tokens == 40,
                      "the last streamed chunk carries usage")

        print("stop strings")
        want = ref[("f16", prompts[0])]
        stop = "Lily"
        r = cl.completions.create(model=model, prompt=prompts[0], max_tokens=40, temperature=0, stop=[stop, "zzz"])
        check(stop in want and r.choices[0].text == want[:want.index(stop)] and r.choices[0].finish_reason == "stop",
              f"stop {stop!r}: text ends before it ({r.choices[0].text!r})")
        text, last = stream_completion(cl, model=model, prompt=prompts[0], max_tokens=40, temperature=0, stop=stop)
        check(text == want[:want.index(stop)] and last.choices[0].finish_reason == "stop", "stop, streamed")

        print("prefix reuse: a conversation that comes back reuses its slot's cache")
        long_p = prompts[0] + want
        r = cl.completions.create(model=model, prompt=long_p, max_tokens=8, temperature=0)
        cached = r.usage.prompt_tokens_details.cached_tokens
        check(cached > 0 and cached < r.usage.prompt_tokens, f"cached_tokens {cached} of {r.usage.prompt_tokens}")
        check(r.model_extra["timings"]["reused_tokens"] == cached, "timings.reused_tokens agrees")
        m = srv.metrics()
        check(m["veloxquant_prompt_tokens_reused_total"] >= cached, "metrics count the reused tokens")

        print("sampling: a seed reproduces a sampled completion")
        a = cl.completions.create(model=model, prompt=prompts[2], max_tokens=30, temperature=0.9, top_p=0.9, seed=SEED)
        b = cl.completions.create(model=model, prompt=prompts[2], max_tokens=30, temperature=0.9, top_p=0.9, seed=SEED)
        check(a.choices[0].text == b.choices[0].text, "same seed, same text")

        print("concurrent requests equal sequential ones (batched decode)")
        seq = {p: cl.completions.create(model=model, prompt=p, max_tokens=60, temperature=0).choices[0].text
               for p in prompts}
        jobs = [prompts[i % 4] for i in range(12)]
        with cf.ThreadPoolExecutor(12) as ex:
            outs = list(ex.map(lambda p: cl.completions.create(model=model, prompt=p, max_tokens=60,
                                                               temperature=0).choices[0].text, jobs))
        check(all(o == seq[p] for o, p in zip(outs, jobs)), "12 concurrent greedy completions equal the sequential ones")
        m = srv.wait_idle()
        check(m["veloxquant_slots_active"] == 0 and m["veloxquant_kv_reserved_bytes"] == 0,
              "metrics: zero active slots and zero reserved bytes after")
        check(m["veloxquant_decode_steps_total"] < m["veloxquant_decode_tokens_total"],
              "decode steps batch several slots (steps < tokens)")

        print("chat on a model without a chat template: a 400 that says so")
        try:
            cl.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            check(False, "chat without a template is refused")
        except openai.BadRequestError as e:
            check("chat template" in str(e), f"400: {str(e)[:100]}")

        bad_requests(srv, model, ctx=256)

        print("slot files: save, erase, restore, reuse")
        r = cl.completions.create(model=model, prompt=prompts[3], max_tokens=20, temperature=0)
        slot = r.model_extra["timings"]["slot"]
        st, body = srv.request("POST", f"/slots/{slot}?action=save", {"filename": "s1.bin"})
        check(st == 200 and os.path.exists(os.path.join(slot_dir, "s1.bin")), f"save: {st} {body[:120]!r}")
        held = json.loads(body)["n_tokens"] if st == 200 else -1
        st, _ = srv.request("POST", f"/slots/{slot}?action=erase")
        slots = json.loads(srv.request("GET", "/slots")[1])
        check(st == 200 and slots[slot]["n_tokens"] == 0, "erase empties the slot")
        st, body = srv.request("POST", f"/slots/{slot}?action=restore", {"filename": "s1.bin"})
        check(st == 200 and json.loads(body)["n_tokens"] == held, f"restore: {st} {body[:120]!r}")
        r2 = cl.completions.create(model=model, prompt=prompts[3], max_tokens=20, temperature=0)
        check(r2.choices[0].text == r.choices[0].text and r2.usage.prompt_tokens_details.cached_tokens > 0,
              f"after restore the same prompt reuses {r2.usage.prompt_tokens_details.cached_tokens} tokens, same text")
        for name in ["../escape.bin", ".hidden", "a/b", ""]:
            st, body = srv.request("POST", f"/slots/{slot}?action=save", {"filename": name})
            check(error_shape(st, body, 400), f"filename {name!r}: 400")
        st, body = srv.request("POST", f"/slots/{slot}?action=restore", {"filename": "missing.bin"})
        check(error_shape(st, body, 404), f"restore of a missing file: 404 ({body[:100]!r})")
        st, body = srv.request("POST", "/slots/99?action=save", {"filename": "x.bin"})
        check(error_shape(st, body, 404), "slot 99: 404")
        check(not os.path.exists(os.path.join(os.path.dirname(slot_dir), "escape.bin")), "nothing escaped the dir")
    finally:
        rc, log = srv.stop()
        check(rc == 0, f"SIGTERM: exit {rc}")
        if rc != 0 or failures:
            print(log[-3000:])


def bad_requests(srv, model, ctx):
    print("bad requests: each a 4xx JSON error or a clean close; the server keeps serving")
    P = "/v1/completions"
    cases = [
        ("malformed JSON", b'{"prompt": "x", ', 400, "not valid JSON"),
        ("trailing bytes", b'{"prompt": "x"} xyz', 400, "after the JSON"),
        ("not an object", b'[1,2]', 400, "object"),
        ("empty body", b'', 400, "no body"),
        ("prompt a number", {"prompt": 5}, 400, "'prompt' must be a string"),
        ("max_tokens a string", {"prompt": "x", "max_tokens": "5"}, 400, "integer"),
        ("max_tokens fractional", {"prompt": "x", "max_tokens": 2.5}, 400, "integer"),
        ("temperature a bool", {"prompt": "x", "temperature": True}, 400, "number"),
        ("stream a string", {"prompt": "x", "stream": "yes"}, 400, "true or false"),
        ("unknown field", {"prompt": "x", "frobnicate": 1}, 400, "unknown field 'frobnicate'"),
        ("duplicate field", b'{"prompt": "x", "prompt": "y"}', 400, "twice"),
        ("max_tokens 0", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("max_tokens huge", {"prompt": "x", "max_tokens": 10 ** 9}, 400, "max_tokens"),
        ("max_tokens past the context", {"prompt": "x", "max_tokens": ctx}, 400, "leave"),
        ("prompt longer than the context", {"prompt": "word " * (ctx * 2), "max_tokens": 4}, 400, "context"),
        ("unknown codec", {"prompt": "x", "kv": "zstd9"}, 400, "unknown codec"),
        ("bad codec parameter", {"prompt": "x", "kv": "q4_0:bits=9"}, 400, "kv"),
        ("kv not a string", {"prompt": "x", "kv": 4}, 400, "'kv'"),
        ("codec refusing the head_dim", {"prompt": "x", "kv": "q8_0"}, 400, None if ctx > 256 else "head_dim"),
        ("stop list too long", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ("empty stop", {"prompt": "x", "stop": [""]}, 400, "empty"),
        ("top_p 0", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("n 2", {"prompt": "x", "n": 2}, 400, "'n'"),
        ("other model", {"prompt": "x", "model": "gpt-9"}, 404, "not served"),
        ("no prompt", {"max_tokens": 3}, 400, "required"),
        ("deep nesting", b'{"prompt": "x", "stop": ' + b'[' * 5000 + b']' * 5000 + b'}', 400, None),
    ]
    for name, body, want, frag in cases:
        st, out = srv.request("POST", P, body)
        check(error_shape(st, out, want, frag), f"{name}: {st} {out[:110]!r}")
    st, out = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
    check(error_shape(st, out, 400, "role"), f"chat: unknown role: {st}")
    st, out = srv.request("POST", "/v1/chat/completions", {"messages": []})
    check(error_shape(st, out, 400, "empty"), f"chat: no messages: {st}")
    st, out = srv.request("GET", "/v1/completions")
    check(error_shape(st, out, 405), f"GET on a POST endpoint: {st}")
    st, out = srv.request("GET", "/nowhere")
    check(error_shape(st, out, 404), f"unknown path: {st}")
    # a 10 MB body: refused by its Content-Length, before it is read
    big = b'{"prompt": "' + b'a' * (10 << 20) + b'"}'
    try:
        st, out = srv.request("POST", P, big)
        check(error_shape(st, out, 413), f"10 MB body: {st} {out[:100]!r}")
    except (ConnectionResetError, BrokenPipeError) as e:
        check(True, f"10 MB body: the connection was closed ({e.__class__.__name__})")
    # the same without Content-Length (chunked): read and discarded past the limit, then 413
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536]) for i in range(0, len(big), 65536))
    try:
        got = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                           b"Connection: close\r\n\r\n" + chunked + b"0\r\n\r\n")
        check(got.startswith(b"HTTP/1.1 413") or got == b"", f"10 MB chunked body: {got[:40]!r}")
    except (ConnectionResetError, BrokenPipeError):
        check(True, "10 MB chunked body: the connection was closed")
    # headers trickled byte by byte: served when they are complete
    tb = b'{"prompt": "Once", "max_tokens": 3, "seed": 1}'
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(tb) + tb)
    got = raw_exchange(srv.port, req, trickle=0.002)
    check(got.startswith(b"HTTP/1.1 200") and b'"completion_tokens":3' in got, f"trickled request: {got[:20]!r}")
    # garbage instead of HTTP: an error status or a clean close, never a crash
    for junk in [b"\xff\x16\x03\x01 NOT HTTP\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GARBAGE\r\n\r\n",
                 b"\x00\xff\x16\x03\x01 NOT HTTP\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"]:
        t0 = time.time()
        got = raw_exchange(srv.port, junk, timeout=20)
        dt = time.time() - t0
        check((got == b"" or got.startswith(b"HTTP/1.1 4") or got.startswith(b"HTTP/1.1 5")) and dt < 10,
              f"junk {junk[:12]!r}: {got[:30]!r} after {dt:.2f} s (an error or a close; --idle-timeout 3)")
    # a client that goes away in the middle of a stream, and one that closes before its answer
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": ctx - 16, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    first = s.recv(200)
    s.close()
    check(first.startswith(b"HTTP/1.1 200"), "stream started before the disconnect")
    m = srv.wait_idle(10)
    check(m["veloxquant_slots_active"] == 0 and m["veloxquant_kv_reserved_bytes"] == 0,
          "after the disconnect: no active slot, no reserved bytes")
    st, out = srv.request("GET", "/health")
    check(st == 200 and json.loads(out)["status"] == "ok", "the server still serves after the bad requests")


def long_specs():
    """Two specs whose normalized texts share their first 255+ characters and differ after."""
    part = "f32;window=100000,wprec=32,page=65536,sink=65536"
    head = part + "".join(f"@{i - 5}={part}" for i in range(4))   # layers 0..3 as -5..-2
    return head + "@4=f32;window=4", head + "@4=f16"


def flood(addr, port, n, stop):
    """n connections from addr, each sending one header line a second until stop is set."""
    socks = []
    for _ in range(n):
        try:
            s = socket.socket()
            s.bind((addr, 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        except OSError:
            pass

    def drip():
        i = 0
        while not stop.is_set():
            for s in socks:
                try:
                    s.sendall(b"X-Slow-%d: y\r\n" % i)
                except OSError:
                    pass
            i += 1
            stop.wait(1.0)
    t = threading.Thread(target=drip, daemon=True)
    t.start()
    return socks, t


def closed_by_server(s, within):
    """True when the server ends the connection within `within` seconds."""
    s.settimeout(within)
    try:
        while True:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (socket.timeout, OSError):
        return False


def case_holes(binary):
    for f in STORIES:
        if not os.path.exists(f):
            print(f"skip: {f} not found (../shared/data)")
            sys.exit(77)
    margs = ["-m", STORIES[0], "--tokenizer", STORIES[1]]
    slot_dir = tempfile.mkdtemp(prefix="vq-slots-")
    calib_dir = tempfile.mkdtemp(prefix="vq-calib-")
    other_dir = tempfile.mkdtemp(prefix="vq-other-")
    subprocess.run([binary, "calibrate", *margs, "-f", os.path.join(SHARED, "data", "tinystories-valid-sample.txt"),
                    "-o", os.path.join(calib_dir, "c.cal"), "--tokens", "512", "--ctx", "256"],
                   check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    subprocess.run(["cp", os.path.join(calib_dir, "c.cal"), os.path.join(other_dir, "c.cal")], check=True)
    A, B = long_specs()
    srv = Server(binary, margs, "-np", "1", "-c", "256", "--kv", A, "--slot-save-path", slot_dir,
                 "--calib-dir", calib_dir, "--header-timeout", "2", "--max-conns", "48",
                 "--max-conns-per-client", "8", "--idle-timeout", "30")
    try:
        print("specs longer than 255 characters: the whole spec, and prefix reuse only between equal specs")
        st, body = srv.request("GET", "/v1/models")
        kv_default = json.loads(body)["data"][0]["kv"]
        check(len(kv_default) > 255 and kv_default.endswith("@4=f32;window=4,wprec=16,page=256"),
              f"/v1/models reports the whole --kv ({len(kv_default)} characters, ends {kv_default[-40:]!r})")
        p = "Once upon a time"
        st, body = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 20, "temperature": 0})
        r = json.loads(body) if st == 200 else {}
        check(st == 200 and r["timings"]["kv"] == kv_default, f"a default request runs the whole --kv: {st} {body[:100]!r}")
        want_a = cli_generate(binary, margs, p, 20, kv=A)
        check(st == 200 and r["choices"][0]["text"] == want_a, "its text equals generate --kv A")
        st, body = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 20, "temperature": 0, "kv": B})
        r = json.loads(body) if st == 200 else {}
        kv_b = r["timings"]["kv"] if st == 200 else ""
        common = len(os.path.commonprefix([kv_b, kv_default]))
        check(common > 255, f"the normalized A and B share their first {common} characters (more than 255)")
        check(st == 200 and r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              f"spec B reuses nothing of A's slot: {body[:60]!r}...")
        check(st == 200 and r["timings"]["kv"].endswith("@4=f16"), "B's timings name B's whole spec")
        check(st == 200 and r["choices"][0]["text"] == cli_generate(binary, margs, p, 20, kv=B),
              "B's text equals generate --kv B")
        slots = json.loads(srv.request("GET", "/slots")[1])
        check(slots[0]["kv"].endswith("@4=f16"), "/slots names B's spec")
        st, body = srv.request("POST", "/v1/completions", {"prompt": p + " there", "max_tokens": 4, "kv": B})
        check(st == 200 and json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0,
              "the same spec B again reuses its prefix")

        print("calib= in a request: only a file of --calib-dir, by name; one message for every refusal")
        msgs = set()
        for bad in ["/etc/shadow", "/etc", "/nonexistent/x.cal", os.path.join(other_dir, "c.cal"), "../" +
                    os.path.basename(other_dir) + "/c.cal", "missing.cal", ".c.cal", "/proc/self/environ"]:
            st, body = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "kv": "f32;calib=" + bad})
            ok = error_shape(st, body, 400)
            check(ok, f"calib={bad}: {st}")
            if ok:
                msgs.add(json.loads(body)["error"]["message"])
        check(len(msgs) == 1, f"one message for all: {sorted(msgs)}")
        check(not any("shadow" in m or "etc" in m or "No such" in m or "directory" in m for m in msgs),
              "the message names no file and no reason")
        st, body = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "kv": "f32;calib=c.cal"})
        check(st == 200, f"calib=c.cal of --calib-dir is taken: {st} {body[:120]!r}")

        print("slot files: a directory name, an evicting cache, a NUL: 4xx/501 with a message, never 500")
        os.mkdir(os.path.join(slot_dir, "adir"))
        srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 4})
        for action in ["save", "restore"]:
            st, body = srv.request("POST", f"/slots/0?action={action}", {"filename": "adir"})
            check(error_shape(st, body, 400, "directory"), f"{action} under a directory's name: {st} {body[:100]!r}")
        st, body = srv.request("POST", "/slots/0?action=save", b'{"filename": "x\\u0000y"}')
        check(error_shape(st, body, 400, "NUL"), f"a NUL in the filename: {st} {body[:100]!r}")
        check(not os.path.exists(os.path.join(slot_dir, "x")), "nothing written under the name before the NUL")
        st, body = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 4, "kv": "f32;evict=h2o,budget=48"})
        check(st == 200, f"an evicting cache serves: {st}")
        st, body = srv.request("POST", "/slots/0?action=save", {"filename": "ev.bin"})
        check(st == 501 and "evict" in json.loads(body)["error"]["message"],
              f"saving an evicting cache: 501 naming the limit: {st} {body[:120]!r}")

        print("a complete body then a half-close (shutdown of the client's sending side) gets its answer")
        tb = b'{"prompt": "Once", "max_tokens": 200, "temperature": 0}'
        for name, req in [
                ("chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Connection: close\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(tb), tb)),
                ("content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % len(tb) + tb)]:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall(req)
            s.shutdown(socket.SHUT_WR)
            got = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, socket.timeout):
                pass
            s.close()
            check(got.startswith(b"HTTP/1.1 200") and b'"completion_tokens":200' in got, f"{name}: {got[:40]!r}")

        print("slow-header flood: 150 connections from 127.0.0.2 at one header line a second")
        stop = threading.Event()
        socks, t = flood("127.0.0.2", srv.port, 150, stop)
        time.sleep(0.5)
        worst, ok = 0.0, True
        end = time.time() + 3
        while time.time() < end:
            t0 = time.time()
            try:
                st, body = srv.request("GET", "/health", timeout=5)
                ok = ok and st == 200
            except OSError:
                ok = False
            worst = max(worst, time.time() - t0)
            time.sleep(0.3)
        check(ok and worst < 2, f"/health from 127.0.0.1 answered throughout (slowest {worst:.2f} s)")
        shut = [closed_by_server(s, 6) for s in socks[:8]]
        check(all(shut), f"the flood's connections are closed after --header-timeout 2 ({sum(shut)} of {len(shut)})")
        stop.set()
        t.join()
        for s in socks:
            s.close()
        print("the same from 100 addresses (the per-client cap does not apply): served after the deadline")
        stop = threading.Event()
        many = []
        for i in range(100):
            ss, _ = flood(f"127.0.1.{i + 1}", srv.port, 1, stop)
            many += ss
        t0 = time.time()
        served = False
        while time.time() - t0 < 8 and not served:
            try:
                st, _ = srv.request("GET", "/health", timeout=5)
                served = st == 200
            except OSError:
                time.sleep(0.2)
        dt = time.time() - t0
        check(served and dt < 2 + 2.5, f"/health served {dt:.2f} s into the flood (deadline 2 s)")
        stop.set()
        for s in many:
            s.close()
        print("a slow body: headers whole, then one body byte a second: cut at --header-timeout 2")
        sb = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        sb.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 400\r\n\r\n{")
        stop = threading.Event()

        def drip_body():
            while not stop.is_set():
                try:
                    sb.sendall(b" ")
                except OSError:
                    return
                stop.wait(1.0)
        th = threading.Thread(target=drip_body, daemon=True)
        t0 = time.time()
        th.start()
        shut = closed_by_server(sb, 8)
        dt = time.time() - t0
        stop.set()
        th.join()
        sb.close()
        check(shut and dt < 2 + 2.5, f"a body arriving one byte a second is closed after the deadline ({dt:.2f} s)")
        print("the per-client cap (--max-conns-per-client 8): a ninth connection from one address is refused")
        idle = []
        for _ in range(8):
            c = socket.socket()
            c.bind(("127.0.0.3", 0))
            c.connect(("127.0.0.1", srv.port))
            idle.append(c)
        time.sleep(0.3)
        ninth = socket.socket()
        ninth.bind(("127.0.0.3", 0))
        ninth.connect(("127.0.0.1", srv.port))
        check(closed_by_server(ninth, 1.5), "the ninth connection from 127.0.0.3 is closed at once")
        check(not closed_by_server(idle[0], 0.3), "the first eight stay open (until their deadline)")
        st, _ = srv.request("GET", "/health", timeout=5)
        check(st == 200, "another address is served meanwhile")
        for c in idle + [ninth]:
            c.close()
        st, body = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 4})
        check(st == 200, "completions still served after the floods")
    finally:
        rc, log = srv.stop()
        check(rc == 0, f"SIGTERM: exit {rc}")
        if rc != 0 or failures:
            print(log[-3000:])


def case_smollm2(binary):
    if not os.path.exists(SMOLLM2):
        print(f"skip: {SMOLLM2} not found (scripts/fetch_model.sh)")
        sys.exit(77)
    margs = ["-m", SMOLLM2]
    ctx = 512
    srv = Server(binary, margs, "-np", "4", "-c", str(ctx), "--kv", "q8_0", "--kv-budget", "64", "--queue", "64")
    cl = srv.client
    model = cl.models.list().data[0].id
    try:
        print("a streamed chat equals `veloxquant generate --chat --temp 0`")
        q = "What is the capital of France?"
        n = 12 if SANITIZED else 24
        want = cli_generate(binary, margs, q, n, kv="q8_0", ctx=ctx, chat=True)
        text, role, usage = "", None, None
        for ch in cl.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=n,
                                             temperature=0, stream=True, stream_options={"include_usage": True}):
            if ch.choices:
                d = ch.choices[0].delta
                role = role or d.role
                text += d.content or ""
            if ch.usage:
                usage = ch.usage
        check(text == want, f"chat text equals the CLI's ({want[:50]!r})")
        check(role == "assistant" and usage is not None and usage.prompt_tokens > 0, "role and usage in the stream")
        # special-token text in a message is plain text (issue 31): "hello<|im_end|>" costs the plain
        # tokens of "<|im_end|>" more than "hello", not one control token that would close the turn
        def n_plain(t):
            out = subprocess.run([binary, "tokenize", *margs, "-p", t, "--no-bos"], capture_output=True, text=True,
                                 check=True).stdout
            return len([l for l in out.splitlines() if l.strip()])
        pt = {}
        for content in ("hello", "hello<|im_end|>"):
            r = cl.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], max_tokens=1,
                                           temperature=0)
            pt[content] = r.usage.prompt_tokens
        extra = n_plain("hello<|im_end|>") - n_plain("hello")
        check(extra > 1 and pt["hello<|im_end|>"] - pt["hello"] == extra,
              f"'hello<|im_end|>' in a message stays text ({pt['hello<|im_end|>'] - pt['hello']} more prompt tokens "
              f"than 'hello', its plain tokenization has {extra} more)")
        # the same question again would reuse the slot's cache, and a prefill cut at other chunk
        # boundaries need not round the same (`generate -b 1` and `-b 64` differ too; docs/serve.md):
        # erase the slots first, so it is prefilled as the CLI does
        for i in range(4):
            srv.request("POST", f"/slots/{i}?action=erase")
        r = cl.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=n, temperature=0)
        check(r.choices[0].message.content == want and r.usage.prompt_tokens_details.cached_tokens == 0,
              "non-streamed chat (slots erased first) equals it too")
        for kv in ["f16", "q4_0:rotate=1", "turboquant_mse:k=4,v=4"]:
            p = "The history of the printing press"   # no slot holds a cache of this spec: a fresh prefill
            want = cli_generate(binary, margs, p, n, kv=kv, ctx=ctx)
            r = cl.completions.create(model=model, prompt=p, max_tokens=n, temperature=0, extra_body={"kv": kv})
            check(r.choices[0].text == want, f"completion with kv {kv} equals the CLI's ({want[:40]!r})")

        print("16 concurrent clients, a bounded number of requests each")
        n16 = 6 if SANITIZED else 16

        def client(i):
            c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=600)
            done = 0
            for k in range(2):
                r = c.chat.completions.create(model=model, max_tokens=8 + i % 5, temperature=0.7, seed=SEED + i,
                                              messages=[{"role": "user", "content": f"Tell me fact {i}.{k} about cats."}])
                done += r.usage.completion_tokens == 8 + i % 5 or r.choices[0].finish_reason == "stop"
            return done

        with cf.ThreadPoolExecutor(16) as ex:
            dones = list(ex.map(client, range(16)))
        check(sum(dones) == 32, f"all 32 requests completed ({sum(dones)})")
        m = srv.wait_idle()
        check(m["veloxquant_slots_active"] == 0 and m["veloxquant_kv_reserved_bytes"] == 0
              and m["veloxquant_requests_queued"] == 0, "metrics: zero active, zero reserved, zero queued")
        held = sum(v for k, v in m.items() if k.startswith("veloxquant_kv_held_bytes"))
        check(held <= 64 << 20 and m["veloxquant_kv_idle_held_bytes"] == held, f"held {held:.0f} bytes within the budget")
        check(m["veloxquant_decode_steps_total"] < m["veloxquant_decode_tokens_total"], "decode was batched")
        del n16

        print("a client that disconnects mid-stream frees its slot at once")
        s = open_stream(srv.port, 3)
        t0 = time.time()
        s.close()
        m = srv.wait_idle(10)
        dt = time.time() - t0
        check(m["veloxquant_slots_active"] == 0 and m["veloxquant_requests_cancelled_total"] >= 1,
              f"slot freed {dt:.3f} s after the disconnect")
        check(dt < 2.0, "within 2 s (one step plus the socket check)")
    finally:
        rc, log = srv.stop()
        check(rc == 0, f"exit {rc} on SIGTERM")
        if rc != 0 or failures:
            print(log[-3000:])

    print("a request queued behind a stream whose client disconnects is admitted at once")
    srv = Server(binary, margs, "-np", "1", "-c", str(ctx), "--queue", "4")
    try:
        s = open_stream(srv.port, 3)
        queued = {}
        th = threading.Thread(target=lambda: queued.__setitem__("r", srv.request(
            "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})))
        th.start()
        end = time.time() + 60
        while srv.metrics()["veloxquant_requests_queued"] < 1 and time.time() < end:
            time.sleep(0.01)
        check(srv.metrics()["veloxquant_requests_queued"] == 1, "the second request waits in the queue")
        t0 = time.time()
        s.close()
        th.join(30)
        dt = time.time() - t0
        check(not th.is_alive() and queued.get("r", (0,))[0] == 200,
              f"the queued request completed {dt:.3f} s after the disconnect ({queued.get('r', ('none',))[0]})")
    finally:
        rc, log = srv.stop()
        check(rc == 0, f"exit {rc} on SIGTERM")
        if rc != 0 or failures:
            print(log[-3000:])

    print("a full queue gives 503; SIGTERM finishes the stream in flight, then exits 0")
    srv = Server(binary, margs, "-np", "1", "-c", str(ctx), "--queue", "1")
    long_req = {"messages": [{"role": "user", "content": "Write a long story about a dragon."}], "max_tokens": 60,
                "temperature": 0, "stream": True}
    results = {}

    def run_stream():
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
        c.request("POST", "/v1/chat/completions", body=json.dumps(long_req), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        results["stream"] = (r.status, r.read())

    th = threading.Thread(target=run_stream)
    th.start()
    end = time.time() + 60
    while srv.metrics()["veloxquant_slots_active"] < 1 and time.time() < end:
        time.sleep(0.01)
    th2 = threading.Thread(target=lambda: results.__setitem__("queued", srv.request(
        "POST", "/v1/chat/completions", dict(long_req, stream=False, max_tokens=4))))
    th2.start()
    while srv.metrics()["veloxquant_requests_queued"] < 1 and time.time() < end:
        time.sleep(0.01)
    st, out = srv.request("POST", "/v1/chat/completions", dict(long_req, stream=False))
    try:
        code = json.loads(out)["error"]["code"]
    except Exception:
        code = None
    check(st == 503 and code == "queue_full", f"third request with one slot and --queue 1: {st} {out[:100]!r}")
    srv.p.send_signal(signal.SIGTERM)
    th.join(120)
    th2.join(120)
    st, out = results.get("stream", (0, b""))
    check(st == 200 and out.rstrip().endswith(b"data: [DONE]") and b'"finish_reason":"length"' in out,
          "the stream in flight at SIGTERM ran to its end")
    check(results.get("queued", (0,))[0] == 200, "the queued request was served too")
    rc, log = srv.stop()
    check(rc == 0 and "stopped" in log, f"exit {rc} after SIGTERM")
    try:
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        check(False, "the port is closed after exit")
    except OSError:
        check(True, "the port is closed after exit")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("stories", "holes", "smollm2"):
        print("usage: test_serve.py VELOXQUANT_BINARY stories|holes|smollm2")
        return 2
    {"stories": case_stories, "holes": case_holes, "smollm2": case_smollm2}[sys.argv[2]](sys.argv[1])
    print("PASS" if failures == 0 else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
