#!/usr/bin/env python3
"""kiln-parse against UDPipe 1 on the Turkish treebank split (benches/dragnn/run.py).

Writes the split (train/dev/test, each file split with i % 10: 9 test, 8 dev, else train,
as kiln_dragnn::document::split does) and the parse input (test with UPOS, XPOS, FEATS,
HEAD and DEPREL blanked to `_`) under the work directory; trains UDPipe once with its
default tagger and parser options (no tokenizer: both tools get gold tokenization) and
caches the model there; then, in one run, times UDPipe (ufal.udpipe, one thread) and the
`dragnn` bench binary (kiln-parse's code path, with KILN_NUM_THREADS=1 unless set, so that
its thread count is its core count) on the same input, and prints one JSON object per
measurement. The ratio to quote is taken in `--rounds` rounds, each a UDPipe run right
before a kiln-parse run (beam 1, one core), and summarised as the median of the rounds'
ratios; every other setting (beam 1 and 8, 1 and 2 threads) then runs once against the
median UDPipe speed.

Usage: python3 benches/dragnn/run.py --model DIR [--work DIR] [--repeats 5] [--rounds 3] [--skip-udpipe]
Needs `pip install ufal.udpipe` (the script says so when it is missing). Training UDPipe
takes about an hour on one core, once; the model is cached in the work directory
(target/dragnn-bench/turkish.udpipe by default).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [s for s in text.split("\n\n") if s.strip()]


def write_split(treebank, work):
    parts = {"train": [], "dev": [], "test": []}
    for name in ["web.conllu", "wiki.conllu"]:
        for i, s in enumerate(read_sentences(os.path.join(treebank, name))):
            part = "test" if i % 10 == 9 else "dev" if i % 10 == 8 else "train"
            parts[part].append(s)
    for part, sentences in parts.items():
        with open(os.path.join(work, f"{part}.conllu"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(sentences) + "\n\n")
    blank = []
    for s in parts["test"]:
        rows = []
        for line in s.split("\n"):
            cols = line.split("\t")
            if len(cols) == 10 and not line.startswith("#"):
                for c in (3, 4, 5, 6, 7):
                    cols[c] = "_"
                line = "\t".join(cols)
            rows.append(line)
        blank.append("\n".join(rows))
    with open(os.path.join(work, "test.input.conllu"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(blank) + "\n\n")
    return {k: len(v) for k, v in parts.items()}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load_sentences(udpipe, path):
    fmt = udpipe.InputFormat.newConlluInputFormat()
    fmt.setText(open(path, encoding="utf-8").read())
    out = udpipe.Sentences()
    s = udpipe.Sentence()
    err = udpipe.ProcessingError()
    while fmt.nextSentence(s, err):
        out.push_back(s)
        s = udpipe.Sentence()
    if err.occurred():
        sys.exit(f"{path}: {err.message}")
    return out


def udpipe_model(work):
    try:
        from ufal import udpipe
    except ImportError:
        sys.exit("ufal.udpipe is missing: pip install ufal.udpipe")
    path = os.path.join(work, "turkish.udpipe")
    if not os.path.exists(path):
        t = time.time()
        train = load_sentences(udpipe, os.path.join(work, "train.conllu"))
        dev = load_sentences(udpipe, os.path.join(work, "dev.conllu"))
        err = udpipe.ProcessingError()
        model = udpipe.Trainer.train("morphodita_parsito", train, dev, "none", "", "", err)
        if err.occurred():
            sys.exit(f"udpipe training failed: {err.message}")
        with open(path, "wb") as f:
            f.write(model.encode("latin-1") if isinstance(model, str) else model)
        print(json.dumps({"event": "udpipe_trained", "seconds": time.time() - t}), flush=True)
    return udpipe.Model.load(path), udpipe


def udpipe_runs(model, udpipe, text, tagger, parser, repeats):
    """Seconds of each of `repeats` runs of UDPipe's pipeline over `text`, and the output."""
    runs = []
    out = None
    for _ in range(repeats):
        pipe = udpipe.Pipeline(model, "conllu", tagger, parser, "conllu")
        err = udpipe.ProcessingError()
        t = time.perf_counter()
        out = pipe.process(text, err)
        runs.append(time.perf_counter() - t)
        if err.occurred():
            sys.exit(f"udpipe failed: {err.message}")
    return runs, out


def udpipe_record(what, n, runs, **extra):
    med = statistics.median(runs)
    return {"tool": "udpipe", "what": what, "threads": 1, "sentences": n, "median_s": med,
            "sentences_per_s": n / med, "runs_s": runs, "cpu": cpu_model(), **extra}


def kiln_records(args, beams, threads, repeats):
    cmd = ["cargo", "run", "--release", "-q", "-p", "kiln-benches", "--bin", "dragnn", "--",
           "--model", args.model, "--treebank", args.treebank, "--repeats", str(repeats),
           "--beams", beams, "--threads", threads]
    # kiln's kernels run on the calling thread only, so `threads` is the cores used, as
    # UDPipe's one thread is one core (KILN_NUM_THREADS set by the caller wins)
    env = dict(os.environ)
    env.setdefault("KILN_NUM_THREADS", "1")
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                         env=env).stdout
    return [json.loads(line) for line in out.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="kiln-dragnn model directory")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "dragnn-bench"))
    ap.add_argument("--treebank", default=os.path.join(ROOT, "data", "turkish-treebanks"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of UDPipe then kiln-parse (beam 1, one core), back to back")
    ap.add_argument("--skip-udpipe", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    counts = write_split(args.treebank, args.work)
    print(json.dumps({"event": "split", **counts}), flush=True)
    ud = None
    if not args.skip_udpipe:
        model, udpipe = udpipe_model(args.work)
        path = os.path.join(args.work, "test.input.conllu")
        text = open(path, encoding="utf-8").read()
        n = len(read_sentences(path))
        # This host's speed drifts by tens of percent over minutes, so the ratio is taken
        # per round, from a UDPipe run and a kiln-parse run made one right after the other,
        # and its median over the rounds is the figure to quote.
        speeds, ratios = [], []
        for r in range(max(args.rounds, 1)):
            runs, out = udpipe_runs(model, udpipe, text, "", "", args.repeats)
            if r == 0:
                with open(os.path.join(args.work, "test.udpipe.conllu"), "w",
                          encoding="utf-8") as f:
                    f.write(out)
            rec = udpipe_record("tag+parse", n, runs, round=r)
            print(json.dumps(rec), flush=True)
            (k,) = kiln_records(args, "1", "1", args.repeats)
            k["round"] = r
            k["vs_udpipe"] = k["sentences_per_s"] / rec["sentences_per_s"]
            print(json.dumps(k), flush=True)
            speeds.append(rec["sentences_per_s"])
            ratios.append(k["vs_udpipe"])
        runs, _ = udpipe_runs(model, udpipe, text, "", "none", args.repeats)
        print(json.dumps(udpipe_record("tag", n, runs)), flush=True)
        ud = statistics.median(speeds)
        print(json.dumps({"summary": "kiln-parse beam 1, one core, over UDPipe tag+parse",
                          "rounds": len(ratios), "ratios": ratios,
                          "median_ratio": statistics.median(ratios),
                          "udpipe_median_sentences_per_s": ud, "cpu": cpu_model()}),
              flush=True)
    for rec in kiln_records(args, "1,8", "1,2", args.repeats):
        if ud:
            rec["vs_udpipe"] = rec["sentences_per_s"] / ud
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
