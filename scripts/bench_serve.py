#!/usr/bin/env python3
"""bench_serve.py: `veloxquant serve` under load: at a fixed KV budget, how many conversations of
--conv-tokens fit, and the aggregate decode tokens/s at each concurrency, per KV spec.

One server (-np = the largest concurrency) serves every arm: each request names its spec in the
"kv" field, so the arms interleave (rep, then concurrency, then spec) on one process. A
conversation reserves its full length (prompt + max_tokens = --conv-tokens) at admission; each
client streams --gen tokens and then disconnects (which frees its slot at once), so decode is
measured on conversations that hold their full reservation while the prompt is --prompt-tokens
long. Prompts are distinct slices of real text (WikiText-2), none a prefix of another, so no
request reuses another's cache.

Figures per (spec, concurrency), median [min..max] over --reps:
  fit        conversations the budget holds at once (budget // the server's reservation for one)
  peak act   most slots active at once (sampled from /metrics every 20 ms)
  step tok/s decode tokens / seconds inside the batched decode steps (from /metrics)
  wall tok/s tokens generated / wall time of the whole load (prefill included)
  peak RSS   the server's resident memory, most seen during the load
Standard library only (http.client): run it with any python3. Prints a table and, with --json,
every raw repeat."""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--bin", default=os.path.join(SRC, "build", "veloxquant"))
    a.add_argument("--model", default=os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a.add_argument("--text", default=os.path.join(SRC, "..", "shared", "data", "wikitext-2-raw-test.txt"))
    a.add_argument("--kv", action="append", help="KV spec (repeatable); default: f16, q8_0, q4_0:rotate=1, "
                   "turboquant_mse:k=4,v=4")
    a.add_argument("--budget-mb", type=int, default=256)
    a.add_argument("--conv-tokens", type=int, default=2048, help="a conversation's length (its reservation)")
    a.add_argument("--prompt-tokens", type=int, default=256, help="approximate prompt length")
    a.add_argument("--gen", type=int, default=32, help="tokens each client streams before it disconnects")
    a.add_argument("--conc", default="1,4,16")
    a.add_argument("--reps", type=int, default=3)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--json", action="store_true")
    a.add_argument("--server-log", help="the server's stderr (--verbose) goes here")
    a.add_argument("--plot", help="PNG: conversations that fit and aggregate decode tok/s against concurrency "
                   "(gnuplot)")
    return a.parse_args()


class Srv:
    def __init__(self, args, n_slots):
        cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-np", str(n_slots), "-c", str(args.conv_tokens),
               "--kv-budget", str(args.budget_mb), "--queue", "256", "-t", str(args.threads), "--max-conns", "512"]
        self.log = open(args.server_log, "w") if args.server_log else subprocess.DEVNULL
        if args.server_log:
            cmd.append("--verbose")
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        line = self.p.stdout.readline().decode()
        m = re.search(r":(\d+) ", line)
        if not m:
            sys.exit(f"bench_serve: the server did not start: {line!r}")
        self.port = int(m.group(1))

    def req(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.status, r.read()
        c.close()
        return out

    def metrics(self):
        out = {}
        for line in self.req("GET", "/metrics")[1].decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.p.terminate()
        self.p.wait(120)


def stream_client(port, body, n_gen, out, i):
    """Stream until n_gen text chunks arrived (or the end), then close the connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out[i] = (r.status, 0, r.read()[:200])
        c.close()
        return
    got = 0
    buf = b""
    while got < n_gen:
        try:
            chunk = r.read1(65536)
        except http.client.HTTPException as e:
            out[i] = (599, got, f"the stream broke after {got} chunks: {e!r}".encode())
            c.close()
            return
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: {"):
                got += 1
    c.close()   # the server cancels the rest and frees the slot
    out[i] = (200, got, b"")


def main():
    args = parse()
    specs = args.kv or ["f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:k=4,v=4"]
    concs = [int(x) for x in args.conc.split(",")]
    words = open(args.text, encoding="utf-8").read().split()
    n_words = int(args.prompt_tokens * 0.72)   # WikiText-2: about 1.4 tokens per word with this tokenizer
    srv = Srv(args, max(concs))
    try:
        run(args, specs, concs, words, n_words, srv)
    finally:
        srv.stop()


def run(args, specs, concs, words, n_words, srv):
    cursor = [0]

    def prompt():
        w = words[cursor[0]:cursor[0] + n_words]
        cursor[0] += n_words + 7
        if cursor[0] + n_words > len(words):
            cursor[0] = 0
        return " ".join(w)

    # the server's own reservation for one full conversation, per spec
    fit, reserve = {}, {}
    for s in specs:
        st, out = srv.req("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": args.conv_tokens - 2,
                                                       "kv": s, "stream": False, "stop": [" ", "\n"]})
        if st != 200:
            sys.exit(f"bench_serve: spec {s}: {out[:300]!r}")
        reserve[s] = json.loads(out)["timings"]["kv_reserved_bytes"]
        fit[s] = int(args.budget_mb * 1048576 // reserve[s])
    runs = []
    load = os.getloadavg()
    for rep in range(args.reps):
        for c in concs:
            for s in specs:
                srv.req("POST", "/slots/0?action=erase")
                m0 = srv.metrics()
                bodies = []
                for i in range(c):
                    bodies.append({"prompt": prompt(), "kv": s, "stream": True, "temperature": 0,
                                   "max_tokens": args.conv_tokens - int(args.prompt_tokens * 1.3)})
                out = [None] * c
                peak = {"act": 0, "rss": 0, "held": 0}
                stop = threading.Event()

                def sample():
                    while not stop.is_set():
                        m = srv.metrics()
                        peak["act"] = max(peak["act"], m["veloxquant_slots_active"])
                        peak["rss"] = max(peak["rss"], m["veloxquant_process_resident_bytes"])
                        peak["held"] = max(peak["held"], m["veloxquant_kv_reserved_bytes"])
                        time.sleep(0.02)

                th = threading.Thread(target=sample)
                th.start()
                t0 = time.time()
                ts = [threading.Thread(target=stream_client, args=(srv.port, b, args.gen, out, i))
                      for i, b in enumerate(bodies)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                wall = time.time() - t0
                deadline = time.time() + 60
                while time.time() < deadline:
                    m1 = srv.metrics()
                    if m1["veloxquant_slots_active"] == 0 and m1["veloxquant_requests_queued"] == 0:
                        break
                    time.sleep(0.02)
                stop.set()
                th.join()
                bad = [o for o in out if o[0] != 200]
                if bad:
                    sys.exit(f"bench_serve: {s} c={c}: {bad[0]}")
                dtok = m1["veloxquant_decode_tokens_total"] - m0["veloxquant_decode_tokens_total"]
                dsec = m1["veloxquant_decode_seconds_total"] - m0["veloxquant_decode_seconds_total"]
                gen = sum(o[1] for o in out)
                r = {"rep": rep, "conc": c, "kv": s, "step_tps": dtok / dsec if dsec else 0, "wall_tps": gen / wall,
                     "wall_s": wall, "generated": gen, "peak_active": peak["act"], "peak_rss": peak["rss"],
                     "peak_reserved": peak["held"], "fit": fit[s], "reserve_bytes": reserve[s],
                     "load1": os.getloadavg()[0]}
                runs.append(r)
                print(f"rep {rep} c {c:2d} {s:24s} step {r['step_tps']:7.1f} tok/s  wall {r['wall_tps']:6.1f} tok/s  "
                      f"peak active {peak['act']:.0f}  rss {peak['rss'] / 2**20:.0f} MiB  load {r['load1']:.2f}",
                      file=sys.stderr)

    def med(xs):
        return f"{statistics.median(xs):7.1f} [{min(xs):.1f}..{max(xs):.1f}]"

    print(f"budget {args.budget_mb} MiB, conversations of {args.conv_tokens} tokens (prompt ~{args.prompt_tokens}, "
          f"{args.gen} streamed each), {args.threads} threads, {args.reps} reps; load before {load[0]:.2f}")
    print(f"{'kv':24s} {'reserve MiB':>11s} {'fit':>4s} {'conc':>4s} {'peak act':>8s} "
          f"{'step tok/s median [min..max]':>30s} {'wall tok/s median [min..max]':>30s} {'peak RSS MiB':>12s}")
    for s in specs:
        for c in concs:
            rs = [r for r in runs if r["kv"] == s and r["conc"] == c]
            print(f"{s:24s} {reserve[s] / 2**20:11.2f} {fit[s]:4d} {c:4d} {max(r['peak_active'] for r in rs):8.0f} "
                  f"{med([r['step_tps'] for r in rs]):>30s} {med([r['wall_tps'] for r in rs]):>30s} "
                  f"{max(r['peak_rss'] for r in rs) / 2**20:12.0f}")
    if args.json:
        print(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    if args.plot:
        plot(args, specs, concs, runs, fit)


def plot(args, specs, concs, runs, fit):
    base = os.path.splitext(args.plot)[0]
    with open(base + ".dat", "w") as f:
        for s in specs:
            f.write(f"# {s}\n")
            for c in concs:
                rs = [r["step_tps"] for r in runs if r["kv"] == s and r["conc"] == c]
                ws = [r["wall_tps"] for r in runs if r["kv"] == s and r["conc"] == c]
                f.write(f"{c} {statistics.median(rs):.2f} {min(rs):.2f} {max(rs):.2f} {statistics.median(ws):.2f} "
                        f"{fit[s]}\n")
            f.write("\n\n")
    lines = []
    for i, s in enumerate(specs):
        lines.append(f"'{base}.dat' index {i} using 1:2:3:4 with yerrorlines lw 2 title '{s} (fit {fit[s]})'")
    gp = (f"set terminal pngcairo size 900,520 noenhanced\nset output '{args.plot}'\n"
          f"set title 'veloxquant serve, SmolLM2-135M Q4_1: aggregate decode tok/s (steps), KV budget "
          f"{args.budget_mb} MiB, {args.conv_tokens}-token conversations, {args.threads} threads'\n"
          f"set xlabel 'concurrent clients'\nset ylabel 'decode tokens/s (median, min..max)'\n"
          f"set logscale x 2\nset xtics ({', '.join(str(c) for c in concs)})\nset key left top\nset grid\n"
          f"plot " + ", ".join(lines) + "\n")
    try:
        subprocess.run(["gnuplot"], input=gp.encode(), check=True)
        print(f"plot: {args.plot}")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"plot: gnuplot failed ({e}); data in {base}.dat", file=sys.stderr)


if __name__ == "__main__":
    main()
