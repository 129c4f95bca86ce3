#!/usr/bin/env python3
"""bench_serve.py: `veloxquant serve` under load: at a fixed KV budget, how many conversations of
--conv-tokens fit, and the aggregate decode tokens/s at each concurrency, per KV spec; with
--llamacpp, llama-cpp-python's server (`python -m llama_cpp.server`) on the same load beside it.

Our arms: one server (-np = the largest concurrency) serves them all: each request names its spec
in the "kv" field. A conversation reserves its full length (prompt + max_tokens = --conv-tokens) at
admission; each client streams --gen tokens and then disconnects (which frees its slot at once), so
decode is measured on conversations that hold their full reservation while the prompt is
--prompt-tokens long.

llama.cpp arms (--llamacpp TYPE, repeatable: f16, q8_0, q4_0): one llama-cpp-python server per
TYPE (its cache type is fixed at load: --type_k/--type_v TYPE, --flash_attn true, --n_ctx
--conv-tokens, the same --threads for decode and prefill, --logits_all false, and
--interrupt_requests false: by default that server ends a running stream as soon as another
request waits, which would cut every stream short at concurrency > 1). That server holds ONE
llama context with one sequence (n_seq_max 1) behind a lock, so it serves one request at a time
and the others wait for the lock. Its KV bytes per conversation are read from its own log at
startup ("llama_kv_cache: size = ..."), so "fit" is what the budget would hold by its bytes; "at
once" is what it serves (1). The clients send the same bodies (without our "kv" field).

C++ llama-server arms (--llama-server TYPE, repeatable; --llama-server-bin or env LLAMA_SERVER):
one server per TYPE with N = min(largest --conc, --budget-mb // its logged KV MiB for one
conversation) parallel slots of --conv-tokens cells (-np N -c N*conv), continuous batching, flash
attention on, K and V of TYPE (rotated by llama.cpp for quantized types: its log says
attn_rot_k/v), its host prompt cache off (-cram 0): equal memory, several conversations at once.
A one-slot probe server per TYPE reads the KV size from the log first. Between loads the script
waits until GET /slots shows no slot processing.

All servers are started first and stay up; after --warmup unrecorded rounds (every arm at the
first concurrency: a fresh server's first load can be far slower than the next), the arms
interleave: for each rep, for each concurrency, every arm in turn (the order rotated by one arm
per rep), and every arm at a given (rep, concurrency) gets the same prompts: distinct slices of
real text (WikiText-2), none a prefix of another, so no request reuses another's cache (our slots
hold other specs' caches, which a request of another spec does not reuse; llama.cpp's servers are
separate processes).

Figures per (arm, concurrency), median [min..max] over --reps:
  fit          conversations the budget holds by the server's bytes for one (ours: its reservation;
               llama.cpp: the KV size it logs for n_ctx = --conv-tokens)
  at once      most streams decoding at once, seen by the clients (between a stream's first and
               last token); ours also: peak act, the most slots active (from /metrics, every 20 ms)
  step tok/s   ours only: decode tokens / seconds inside the batched decode steps (/metrics);
               llama-cpp-python's server exposes nothing like it (no /metrics; its timings are
               printed only for a request that runs to its end, and these disconnect)
  client tok/s decode tokens the clients got after each stream's first token / the time during
               which at least one stream was between its first and last token (the union of those
               intervals): the same figure for every arm, from the streams. It is not the same
               work for both: our scheduler prefills the other conversations (one chunk per step)
               while streams decode, so that time is inside the union; a serial server prefills
               each request while no stream is decoding, so its union is decode only
  wall tok/s   tokens the clients got / wall time of the whole load (prefill and waiting included)
  TTFT         median seconds from a request sent to its first token
  peak RSS     the server process's resident memory (/proc/PID/status VmRSS every 20 ms), most seen
               during the load
  others       cores busy with anything but this benchmark (its servers and its own process) during
               the load, from /proc/stat: the contention check (the table shows the most of the reps)
Standard library only (http.client): run it with any python3. Prints a table and, with --json,
every raw repeat (with the load average before and after each load, the commit, the CPU and the
date); --from-json prints the table and the plot again from that file."""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGML_TYPE = {"f16": 1, "q4_0": 2, "q8_0": 8}   # enum ggml_type (llama_cpp.GGML_TYPE_*)


def parse():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--bin", default=os.path.join(SRC, "build", "veloxquant"))
    a.add_argument("--model", default=os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a.add_argument("--text", default=os.path.join(SRC, "..", "shared", "data", "wikitext-2-raw-test.txt"))
    a.add_argument("--kv", action="append", help="our KV spec (repeatable); default: f16, q8_0, q4_0:rotate=1, "
                   "turboquant_mse:k=4,v=4; 'none': no arm of ours")
    a.add_argument("--llamacpp", action="append", choices=sorted(GGML_TYPE),
                   help="a llama-cpp-python server arm with this K and V cache type (repeatable)")
    a.add_argument("--llamacpp-python", default=os.path.join(SRC, ".venv-llamacpp", "bin", "python"),
                   help="the python with llama_cpp and its server extras")
    a.add_argument("--llama-server", action="append", choices=sorted(GGML_TYPE),
                   help="a C++ llama-server arm with this K and V cache type (repeatable): -np N parallel slots, "
                   "N = the conversations its KV bytes fit in --budget-mb (at most the largest --conc), "
                   "-c N*--conv-tokens, continuous batching, flash attention on")
    a.add_argument("--llama-server-bin", default=os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server"),
                   help="the llama-server binary (env LLAMA_SERVER)")
    a.add_argument("--server-cpus", help="pin every server to these CPUs (taskset list, e.g. 2,3) and this "
                   "script with its clients to the others: for a quiet many-core machine")
    a.add_argument("--budget-mb", type=int, default=256)
    a.add_argument("--conv-tokens", type=int, default=2048, help="a conversation's length (its reservation)")
    a.add_argument("--prompt-tokens", type=int, default=256, help="approximate prompt length")
    a.add_argument("--gen", type=int, default=32, help="tokens each client streams before it disconnects")
    a.add_argument("--conc", default="1,4,16")
    a.add_argument("--reps", type=int, default=3)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--warmup", type=int, default=1, help="unrecorded rounds (every arm at the first concurrency) "
                   "before the reps: the first loads on a fresh server page in the model")
    a.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="every raw repeat as JSON, to FILE (default: stdout, after the table)")
    a.add_argument("--server-log", help="the servers' stderr goes here (ours with --verbose; llama.cpp's "
                   "as FILE.llamacpp-TYPE)")
    a.add_argument("--from-json", help="print the table (and --plot) again from this --json output; runs nothing")
    a.add_argument("--plot", help="PNG: streams served at once, client decode tok/s and wall tok/s against "
                   "concurrency (gnuplot)")
    a = a.parse_args()
    if a.reps < 1 or a.warmup < 0:
        sys.exit("bench_serve: --reps >= 1, --warmup >= 0")
    return a


def get(port, method, path, body=None, timeout=3600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def cpu_ticks(pids):
    """(busy ticks of the whole machine, ticks used by these processes): /proc/stat and /proc/PID/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = sum(v) - v[3] - v[4]   # all but idle and iowait
    mine = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            mine += int(st[11]) + int(st[12])   # utime, stime
        except OSError:
            pass
    return busy, mine


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Srv:
    """veloxquant serve: every spec of ours on one process."""
    def __init__(self, args, n_slots):
        cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-np", str(n_slots), "-c", str(args.conv_tokens),
               "--kv-budget", str(args.budget_mb), "--queue", "256", "-t", str(args.threads), "--max-conns", "512"]
        self.log = open(args.server_log, "w") if args.server_log else subprocess.DEVNULL
        if args.server_log:
            cmd.append("--verbose")
        cmd = pin_cmd(args, cmd)
        self.cmd = cmd
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        line = self.p.stdout.readline().decode()
        m = re.search(r":(\d+) ", line)
        if not m:
            sys.exit(f"bench_serve: the server did not start: {line!r}")
        self.port = int(m.group(1))

    def metrics(self):
        out = {}
        for line in get(self.port, "GET", "/metrics")[1].decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def idle(self):
        """Wait until no slot is active and nothing is queued (at most 60 s); the last metrics."""
        deadline = time.time() + 60
        while True:
            m = self.metrics()
            if (m["veloxquant_slots_active"] == 0 and m["veloxquant_requests_queued"] == 0) or time.time() > deadline:
                return m
            time.sleep(0.02)

    def stop(self):
        self.p.terminate()
        self.p.wait(120)


def wait_ready(srv, name, path):
    """Poll GET path until 200 (at most 300 s); exit with a message if the process dies or never answers."""
    deadline = time.time() + 300
    while True:
        if srv.p.poll() is not None:
            sys.exit(f"bench_serve: {name} exited {srv.p.returncode}: {' '.join(srv.cmd)}")
        try:
            if get(srv.port, "GET", path, timeout=5)[0] == 200:
                return
        except OSError:
            pass
        if time.time() > deadline:
            srv.stop()
            sys.exit(f"bench_serve: {name} did not answer in 300 s")
        time.sleep(0.2)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class LlamaProc:
    """A llama.cpp server process (self.p): SIGTERM, then SIGKILL after 60 s."""
    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class LlamaSrv(LlamaProc):
    """llama-cpp-python's server with one cache type for K and V."""
    def __init__(self, args, typ, verbose, log=None):
        self.port = free_port()
        self.cmd = pin_cmd(args, [args.llamacpp_python, "-m", "llama_cpp.server", "--model", args.model,
                    "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                    "--n_ctx", str(args.conv_tokens), "--type_k", str(GGML_TYPE[typ]), "--type_v", str(GGML_TYPE[typ]),
                    "--flash_attn", "true", "--logits_all", "false", "--interrupt_requests", "false",
                    "--verbose", "true" if verbose else "false", "--host", "127.0.0.1", "--port", str(self.port)])
        self.log_path = log
        self.log = open(log, "w") if log else subprocess.DEVNULL
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_ready(self, f"llama_cpp.server ({typ})", "/v1/models")

    def idle(self):
        """/v1/models takes the server's model lock: it answers once no request holds it."""
        get(self.port, "GET", "/v1/models")
        return None



def pin_cmd(args, cmd):
    return (["taskset", "-c", args.server_cpus] + cmd) if args.server_cpus else cmd


class LlamaCppServer(LlamaProc):
    """The C++ llama-server: N parallel slots over one KV cache of N * --conv-tokens cells (unified,
    its default), continuous batching (its default), flash attention on, K and V of one type, its
    host-memory prompt cache off (-cram 0: it would hold memory outside the KV budget)."""
    def __init__(self, args, typ, n_par, verbose=False, log=None):
        self.port = free_port()
        self.n_par = n_par
        self.cmd = pin_cmd(args, [args.llama_server_bin, "-m", args.model, "-t", str(args.threads),
                                  "-tb", str(args.threads), "-c", str(n_par * args.conv_tokens), "-np", str(n_par),
                                  "-ctk", typ, "-ctv", typ, "-fa", "on", "-cram", "0", "--no-webui", "--metrics",
                                  "--host", "127.0.0.1", "--port", str(self.port)] + (["-v"] if verbose else []))
        self.log_path = log
        self.log = open(log, "w") if log else subprocess.DEVNULL
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_ready(self, f"llama-server ({typ})", "/health")

    def idle(self):
        """Wait until no slot is processing (GET /slots), at most 60 s."""
        deadline = time.time() + 60
        while time.time() < deadline:
            st, out = get(self.port, "GET", "/slots")
            if st == 200 and not any(s.get("is_processing") for s in json.loads(out)):
                return None
            time.sleep(0.02)
        print(f"bench_serve: warning: llama-server on port {self.port} still had a slot processing after 60 s; "
              "the next load starts anyway", file=sys.stderr)
        return None



def llama_server_probe(args, typ):
    """One slot of --conv-tokens once: the KV bytes llama-server logs for one conversation."""
    log = (args.server_log + f".llama-server-{typ}-probe") if args.server_log else f"/tmp/bench_serve.{os.getpid()}.log"
    s = LlamaCppServer(args, typ, 1, True, log)
    s.stop()
    text = open(log, errors="replace").read()
    if not args.server_log:
        os.unlink(log)
    m = re.search(r"llama_kv_cache: size =\s*([0-9.]+) MiB \(\s*(\d+) cells.*?K \((\w+)\).*?V \((\w+)\)", text)
    if not m:
        sys.exit(f"bench_serve: llama-server ({typ}): no KV size in its log")
    if m.group(3) != typ or m.group(4) != typ:
        sys.exit(f"bench_serve: llama-server ({typ}): its cache is K {m.group(3)} V {m.group(4)}")
    return {"kv_mib": float(m.group(1)), "cells": int(m.group(2)),
            "rot": re.findall(r"attn_rot_[kv] = \d", text), "flash_attn": re.findall(r"flash_attn\s*= \w+", text)[:1]}


def llamacpp_probe(args, typ):
    """Start the server verbose once: llama.cpp's own KV size for n_ctx = --conv-tokens, n_seq_max."""
    log = (args.server_log + f".llamacpp-{typ}-probe") if args.server_log else f"/tmp/bench_serve.{os.getpid()}.log"
    s = LlamaSrv(args, typ, True, log)
    s.stop()
    text = open(log, errors="replace").read()
    if not args.server_log:
        os.unlink(log)
    m = re.search(r"llama_kv_cache: size =\s*([0-9.]+) MiB \(\s*(\d+) cells.*?K \((\w+)\).*?V \((\w+)\)", text)
    n = re.search(r"n_seq_max\s*=\s*(\d+)", text)
    fa = re.search(r"llama_context: flash_attn\s*=\s*(\w+)", text)
    if not m or not n:
        sys.exit(f"bench_serve: llama_cpp.server ({typ}): no KV size or n_seq_max in its log")
    if m.group(3) != typ or m.group(4) != typ:
        sys.exit(f"bench_serve: llama_cpp.server ({typ}): its cache is K {m.group(3)} V {m.group(4)}")
    return {"kv_mib": float(m.group(1)), "cells": int(m.group(2)), "n_seq_max": int(n.group(1)),
            "flash_attn": fa.group(1) if fa else "?"}


def stream_client(port, body, n_gen, out, i):
    """Stream until n_gen text chunks arrived (or the end), then close the connection. Records the
    time the request was sent, of its first and of its last chunk."""
    t_send = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out[i] = {"status": r.status, "got": 0, "err": r.read()[:200]}
        c.close()
        return
    got = 0
    buf = b""
    t_first = t_last = None
    while got < n_gen:
        try:
            chunk = r.read1(65536)
        except http.client.HTTPException as e:
            out[i] = {"status": 599, "got": got, "err": f"the stream broke after {got} chunks: {e!r}".encode()}
            c.close()
            return
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            ev = ev.strip(b"\r\n")
            if ev.startswith(b"data: {"):
                got += 1
                t_last = time.time()
                if t_first is None:
                    t_first = t_last
    c.close()   # the server cancels the rest (ours frees the slot; llama.cpp's releases its lock)
    out[i] = {"status": 200, "got": got, "err": b"", "t_send": t_send, "t_first": t_first, "t_last": t_last}


def union_len(iv):
    tot, end = 0.0, None
    for a, b in sorted(iv):
        if end is None or a > end:
            tot += b - a
            end = b
        elif b > end:
            tot += b - end
            end = b
    return tot


def max_overlap(iv):
    ev = sorted([(a, 1) for a, b in iv] + [(b, -1) for a, b in iv], key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", SRC, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip() != ""
    except OSError:
        commit, dirty = "?", False
    return {"cpu": cpu, "cores": os.cpu_count(), "commit": commit, "dirty": dirty,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main():
    args = parse()
    if args.from_json:   # the table and the plot again from a --json run, nothing measured
        d = json.load(open(args.from_json))
        for k, v in d["args"].items():
            if k not in ("plot", "from_json", "json"):
                setattr(args, k, v)
        concs = [int(x) for x in args.conc.split(",")]
        report(args, d["arms"], concs, d["runs"], d["load_before"], d["load_after"])
        if args.plot:
            plot(args, d["arms"], concs, d["runs"])
        return
    specs = args.kv or ["f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:k=4,v=4"]
    if specs == ["none"]:
        specs = []
    lcp = args.llamacpp or []
    concs = [int(x) for x in args.conc.split(",")]
    words = open(args.text, encoding="utf-8").read().split()
    n_words = int(args.prompt_tokens * 0.72)   # WikiText-2: about 1.4 tokens per word with this tokenizer
    servers = []
    try:
        arms = []
        info = {}
        if args.server_cpus:   # the servers on these CPUs, this script and its clients on the others
            cpus = set()
            for part in args.server_cpus.split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            rest = set(os.sched_getaffinity(0)) - cpus
            if not rest:
                sys.exit("bench_serve: --server-cpus leaves no CPU for the clients")
            os.sched_setaffinity(0, rest)
        lsv = args.llama_server or []
        for t in lcp:   # one at a time, before the load: each reads its model and logs its cache
            info[t] = llamacpp_probe(args, t)
        for t in lsv:
            info["server " + t] = llama_server_probe(args, t)
        if specs:
            srv = Srv(args, max(concs))
            servers.append(srv)
            for s in specs:
                arms.append({"label": s, "srv": srv, "extra": {"kv": s}, "ours": True})
        for t in lcp:
            ls = LlamaSrv(args, t, False, (args.server_log + f".llamacpp-{t}") if args.server_log else None)
            servers.append(ls)
            arms.append({"label": f"llama.cpp {t}", "srv": ls, "extra": {}, "ours": False, "type": t})
        for t in lsv:
            i = info["server " + t]
            n_par = max(1, min(max(concs), int(args.budget_mb // i["kv_mib"])))
            ls = LlamaCppServer(args, t, n_par, False,
                                (args.server_log + f".llama-server-{t}") if args.server_log else None)
            servers.append(ls)
            i["n_par"] = n_par   # its cache: n_par sequences of --conv-tokens cells (not unified when -np is given)
            arms.append({"label": f"llama-server {t}", "srv": ls, "extra": {}, "ours": False, "type": "server " + t})
        t_start = machine()
        runs, load, load_after = run(args, arms, concs, words, n_words, info)
    finally:
        for s in servers:
            s.stop()
    report(args, arms, concs, runs, load, load_after)
    if args.json:
        dump = (json.dumps({"args": vars(args), "machine": t_start, "end": machine()["date"], "load_before": load,
                          "load_after": load_after, "servers": {a["label"]: a["srv"].cmd for a in arms},
                          "llamacpp": info,
                          "arms": [{k: a[k] for k in ("label", "ours", "reserve", "fit", "serves")} for a in arms],
                          "runs": runs}, indent=1))
        if args.json == "-":
            print(dump)
        else:
            with open(args.json, "w") as f:
                f.write(dump + "\n")
    if args.plot:
        plot(args, arms, concs, runs)


def run(args, arms, concs, words, n_words, info):
    cursor = [0]

    def prompt():
        w = words[cursor[0]:cursor[0] + n_words]
        cursor[0] += n_words + 7
        if cursor[0] + n_words > len(words):
            cursor[0] = 0
        return " ".join(w)

    # bytes for one full conversation and what fits in the budget, per arm
    for a in arms:
        if a["ours"]:
            st, out = get(a["srv"].port, "POST", "/v1/completions",
                          {"prompt": "Hello", "max_tokens": args.conv_tokens - 2, "kv": a["label"], "stream": False,
                           "stop": [" ", "\n"]})
            if st != 200:
                sys.exit(f"bench_serve: spec {a['label']}: {out[:300]!r}")
            a["reserve"] = json.loads(out)["timings"]["kv_reserved_bytes"]
            a["serves"] = max(concs)
        else:
            i = info[a["type"]]
            a["reserve"] = int(round(i["kv_mib"] * 2**20))
            a["serves"] = i.get("n_par", i.get("n_seq_max"))
        a["fit"] = int(args.budget_mb * 1048576 // a["reserve"])
    runs = []
    load = os.getloadavg()
    n = len(arms)
    for rep in range(-args.warmup, args.reps):
        order = arms[rep % n:] + arms[:rep % n]
        for c in (concs[:1] if rep < 0 else concs):
            prompts = [prompt() for _ in range(c)]
            for a in order:
                srv = a["srv"]
                srv.idle()
                m0 = None
                if a["ours"]:
                    get(srv.port, "POST", "/slots/0?action=erase")
                    m0 = srv.metrics()
                bodies = [dict({"prompt": p, "stream": True, "temperature": 0,
                                "max_tokens": args.conv_tokens - int(args.prompt_tokens * 1.3)}, **a["extra"])
                          for p in prompts]
                out = [None] * c
                peak = {"act": 0, "rss": 0, "held": 0}
                stop = threading.Event()

                def sample():
                    while not stop.is_set():
                        peak["rss"] = max(peak["rss"], rss(srv.p.pid))
                        if a["ours"]:
                            m = srv.metrics()
                            peak["act"] = max(peak["act"], m["veloxquant_slots_active"])
                            peak["held"] = max(peak["held"], m["veloxquant_kv_reserved_bytes"])
                        time.sleep(0.02)

                load0 = os.getloadavg()[0]
                pids = [os.getpid()] + sorted({b["srv"].p.pid for b in arms})
                cpu0 = cpu_ticks(pids)
                th = threading.Thread(target=sample, daemon=True)
                th.start()
                t0 = time.time()
                ts = [threading.Thread(target=stream_client, args=(srv.port, b, args.gen, out, i), daemon=True)
                      for i, b in enumerate(bodies)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                wall = time.time() - t0
                cpu1 = cpu_ticks(pids)
                tick = os.sysconf("SC_CLK_TCK")
                # cores busy with other work than this benchmark's (its servers and clients) during the load
                others = max(0.0, ((cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / tick / wall)
                m1 = srv.idle()
                stop.set()
                th.join()
                bad = [o for o in out if o["status"] != 200 or o["got"] == 0]
                if bad:
                    sys.exit(f"bench_serve: {a['label']} c={c}: {bad[0]}")
                iv = [(o["t_first"], o["t_last"]) for o in out if o["t_first"] is not None]
                dec = sum(o["got"] - 1 for o in out if o["got"] > 0)
                ul = union_len(iv)
                gen = sum(o["got"] for o in out)
                r = {"rep": rep, "conc": c, "arm": a["label"], "ours": a["ours"],
                     "client_tps": dec / ul if ul else 0, "wall_tps": gen / wall, "wall_s": wall, "generated": gen,
                     "at_once": max_overlap(iv), "ttft": statistics.median(o["t_first"] - o["t_send"] for o in out),
                     "ttft_max": max(o["t_first"] - o["t_send"] for o in out),
                     "peak_rss": peak["rss"], "fit": a["fit"], "reserve_bytes": a["reserve"],
                     "load1_before": load0, "load1_after": os.getloadavg()[0], "other_cores": others,
                     "streams": [[o["t_send"] - t0, o["t_first"] - t0, o["t_last"] - t0, o["got"]] for o in out]}
                if a["ours"]:
                    dtok = m1["veloxquant_decode_tokens_total"] - m0["veloxquant_decode_tokens_total"]
                    dsec = m1["veloxquant_decode_seconds_total"] - m0["veloxquant_decode_seconds_total"]
                    r.update({"step_tps": dtok / dsec if dsec else 0, "peak_active": peak["act"],
                              "peak_reserved": peak["held"]})
                if rep >= 0:
                    runs.append(r)
                step = f"step {r['step_tps']:7.1f}" if a["ours"] else "step     n/a"
                print(f"{'warmup' if rep < 0 else 'rep'} {rep} c {c:2d} {a['label']:24s} {step}  client "
                      f"{r['client_tps']:6.1f}  wall "
                      f"{r['wall_tps']:6.1f} tok/s  at once {r['at_once']}  ttft {r['ttft']:.2f} s  rss "
                      f"{peak['rss'] / 2**20:.0f} MiB  load {load0:.2f}->{r['load1_after']:.2f}  others {others:.2f} cores",
                      file=sys.stderr)
    return runs, load, os.getloadavg()


def report(args, arms, concs, runs, load, load_after):
    def med(xs):
        return f"{statistics.median(xs):7.1f} [{min(xs):.1f}..{max(xs):.1f}]"

    print(f"budget {args.budget_mb} MiB, conversations of {args.conv_tokens} tokens (prompt ~{args.prompt_tokens}, "
          f"{args.gen} streamed each), {args.threads} threads, {args.reps} reps; load average before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}")
    print(f"{'arm':24s} {'MiB/conv':>8s} {'fit':>4s} {'conc':>4s} {'at once':>7s} "
          f"{'step tok/s (ours)':>26s} {'client decode tok/s':>26s} {'wall tok/s':>26s} {'TTFT s':>6s} "
          f"{'RSS MiB':>7s} {'others':>6s}")
    for a in arms:
        for c in concs:
            rs = [r for r in runs if r["arm"] == a["label"] and r["conc"] == c]
            step = med([r["step_tps"] for r in rs]) if a["ours"] else "n/a"
            print(f"{a['label']:24s} {a['reserve'] / 2**20:8.2f} {a['fit']:4d} {c:4d} "
                  f"{max(r['at_once'] for r in rs):7d} {step:>26s} {med([r['client_tps'] for r in rs]):>26s} "
                  f"{med([r['wall_tps'] for r in rs]):>26s} {statistics.median(r['ttft'] for r in rs):6.2f} "
                  f"{max(r['peak_rss'] for r in rs) / 2**20:7.0f} {max(r.get('other_cores', -1) for r in rs):6.2f}")


def plot(args, arms, concs, runs):
    base = os.path.splitext(args.plot)[0]
    with open(base + ".dat", "w") as f:
        f.write("# conc  at_once  client_tps_median min max  wall_tps_median min max  step_tps_median (ours; -1: "
                "n/a)  fit\n")
        for a in arms:
            f.write(f"# {a['label']}\n")
            for c in concs:
                rs = [r for r in runs if r["arm"] == a["label"] and r["conc"] == c]
                cl = [r["client_tps"] for r in rs]
                wl = [r["wall_tps"] for r in rs]
                st = statistics.median(r["step_tps"] for r in rs) if a["ours"] else -1
                f.write(f"{c} {max(r['at_once'] for r in rs)} {statistics.median(cl):.2f} {min(cl):.2f} {max(cl):.2f} "
                        f"{statistics.median(wl):.2f} {min(wl):.2f} {max(wl):.2f} {st:.2f} {a['fit']}\n")
            f.write("\n\n")
    # one colour per cache type: our arm and llama.cpp's of the same type share it (solid / dashed)
    pal = {"f16": "#1f77b4", "q8_0": "#2ca02c", "q4_0": "#d62728"}
    more = iter(["#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"] * 4)
    style, taken = [], set()
    for a in arms:
        typ = a["label"].split(":")[0] if a["ours"] else a["label"].split()[-1]
        col = pal.get(typ) if (a["ours"], typ) not in taken else None
        taken.add((a["ours"], typ))
        col = col or next(more)
        dt, pt = (1, 7) if a["ours"] else (2, 5)
        style.append(f"lw 2 dt {dt} pt {pt} lc rgb '{col}'")
    p1 = ", ".join(f"'{base}.dat' index {i} using 1:2 with linespoints {style[i]} "
                   f"title '{a['label']} (fit {a['fit']})'" for i, a in enumerate(arms))
    p2 = ", ".join(f"'{base}.dat' index {i} using 1:3:4:5 with yerrorlines {style[i]} title '{a['label']}'"
                   for i, a in enumerate(arms))
    p3 = ", ".join(f"'{base}.dat' index {i} using 1:6:7:8 with yerrorlines {style[i]} title '{a['label']}'"
                   for i, a in enumerate(arms))
    xt = (f"set logscale x 2\nset xrange [{min(concs) / 1.25}:{max(concs) * 1.25}]\n"
          f"set xtics ({', '.join(str(c) for c in concs)})\nset grid\n"
          "set xlabel 'concurrent clients'\n")
    gp = (f"set terminal pngcairo size 1500,560 noenhanced font ',10'\nset output '{args.plot}'\n"
          f"set multiplot layout 1,3 title \"{os.path.basename(args.model)}: {args.conv_tokens}-token conversations "
          f"(prompt ~{args.prompt_tokens}, {args.gen} streamed each), KV budget {args.budget_mb} MiB, {args.threads} "
          f"threads\\nsolid: veloxquant serve; dashed: llama.cpp (llama-cpp-python server, C++ llama-server); median, bars min..max of "
          f"{args.reps}\"\n" + xt +
          "set title 'conversations decoding at once (fit: by KV bytes)'\nset ylabel 'streams'\nset key left top\n"
          f"plot {p1}\n"
          "set yrange [0:*]\nset title 'aggregate decode tok/s (client side)'\nset ylabel 'tokens/s'\nunset key\n"
          f"plot {p2}\n"
          "set title 'wall tok/s (prefill and queueing included)'\nset ylabel 'tokens/s'\n"
          f"plot {p3}\nunset multiplot\n")
    try:
        subprocess.run(["gnuplot"], input=gp.encode(), check=True)
        print(f"plot: {args.plot}")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"plot: gnuplot failed ({e}); data in {base}.dat", file=sys.stderr)


if __name__ == "__main__":
    main()
