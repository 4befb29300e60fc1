"""g2p-en beam search in numpy, with kiln-beam's semantics, and the side-by-side benchmark
against kiln's `beam` bench binary (issue 6). Run through ./beam.sh, which makes the venv and
builds the binary; `python beam_numpy.py --kiln PATH [--quick]` runs it directly.

The model (GRU cell, encoder, decoder step, log-softmax) is the numpy reference of
crates/kiln-beam/tests/fixtures/gen_g2p_fixtures.py, loaded from that file (its definitions
only: the file runs its fixture generation at the top level, so it is not imported as a whole).
The search is written here, with kiln-beam's semantics (crates/kiln-beam/src/search.rs):

- a sentence's beam starts at `beam` rows and shrinks by one for each hypothesis that ends;
  each step the `beam_left` best of (live rows × vocabulary) are taken, ties to the lower
  index of `row·V + word` (kiln's `top_k`), costs summed in float64 over float32
  log-probabilities, `<unk>` suppressed;
- a hypothesis ends at `</s>` or when its length reaches
  `max(1, ceil(max_length_factor × source length))` (source: letters + `</s>`);
- finished hypotheses are ranked by `(cost − wp·len) / len^α`, ties in order of finishing.

Two implementations, both "all beam rows through one matmul per step":
- `decode_word`: one word at a time, its live rows through one GRU step (the natural numpy
  program, and the reference the issue's goal is stated against);
- `decode_batch`: a mini-batch of words (sorted by length, 16 at a time, as kiln's
  `decode_parallel` does), all `words × beam` rows through one step with dead rows at cost
  −∞, exactly kiln-beam's layout: the strongest numpy program I could write for this.

"2 threads" for numpy is two worker processes (fork) taking chunks of the word list: numpy
holds the GIL between these small operations, so Python threads would not run in parallel.
OpenBLAS is limited to one thread per process (its small-matrix paths are single-threaded
anyway).
"""

import ast
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(ROOT, "crates", "kiln-beam", "tests", "fixtures", "gen_g2p_fixtures.py")
WORDS = os.path.join(ROOT, "benches", "data", "g2p_words.txt")

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def load_reference(path=REFERENCE):
    """The reference generator's definitions (imports, model tensors, functions) as a module,
    without running its fixture generation (the top-level statements after them)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            keep.append(node)
        elif isinstance(node, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id in ("ROOT", "V", "G", "g2i") for t in node.targets):
            keep.append(node)
    mod = types.ModuleType("g2p_reference")
    mod.__file__ = path
    exec(compile(ast.Module(keep, type_ignores=[]), path, "exec"), mod.__dict__)
    # np.load of an .npz is lazy: every V[name] re-reads and re-inflates the member. Any
    # numpy user keeps the arrays; the reference's functions read the module global V.
    mod.V = {k: mod.V[k] for k in mod.V.files}
    return mod


ref = load_reference()
VOCAB = ref.V["fc_b"].shape[0]


def score(cost, length, normalize, word_penalty):
    length = float(max(length, 1))
    return (cost - word_penalty * length) / length ** normalize


def top_k_rows(total, k):
    """Per row of `total` [n, m]: the k largest values and their indices, best first, ties to
    the lower index (kiln's `top_k`). argpartition, then an exact order of the k; rows with a
    tie across the cut fall back to a stable sort."""
    n, m = total.shape
    if k >= m:
        idx = np.argsort(-total, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(total, idx, 1), idx
    idx = np.argpartition(-total, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(total, idx, 1)
    order = np.lexsort((idx, -vals), axis=1)
    idx = np.take_along_axis(idx, order, 1)
    vals = np.take_along_axis(vals, order, 1)
    tied = np.count_nonzero(total >= vals[:, -1:], axis=1) > k
    for r in np.flatnonzero(tied):
        idx[r] = np.argsort(-total[r], kind="stable")[:k]
        vals[r] = total[r, idx[r]]
    return vals, idx


def max_len(word, factor):
    return max(1, math.ceil(factor * (len(word) + 1)))


def decode_word(word, beam, factor=3.0, normalize=0.0, word_penalty=0.0):
    """One word: finished hypotheses [(score, cost, phoneme ids incl. </s>)], best first."""
    limit = max_len(word, factor)
    h = ref.encode(word)  # [1, H]
    hyps, costs, prev = [()], np.zeros(1), [BOS]
    left, done = beam, []
    while hyps:
        h, lp = ref.step(h, prev)  # one GRU step and log-softmax for all live rows
        total = costs[:, None] + lp
        total[:, UNK] = -np.inf
        vals, idx = top_k_rows(total.reshape(1, -1), min(left, total.size))
        keep, ended = [], 0
        for c, i in zip(vals[0].tolist(), idx[0].tolist()):
            if c == -np.inf:
                break
            r, w = divmod(i, VOCAB)
            hyp = hyps[r] + (w,)
            if w == EOS or len(hyp) >= limit:
                done.append((score(c, len(hyp), normalize, word_penalty), c, hyp))
                ended += 1
            else:
                keep.append((r, hyp, c, w))
        left -= ended
        keep = keep[:left]
        if not keep:
            break
        h = h[[k[0] for k in keep]]
        hyps = [k[1] for k in keep]
        costs = np.array([k[2] for k in keep])
        prev = [k[3] for k in keep]
    done.sort(key=lambda d: -d[0])  # stable: equal scores keep the order of finishing
    return done


def decode_batch(words, beam, factor=3.0, normalize=0.0, word_penalty=0.0):
    """A mini-batch in kiln-beam's layout: [words × beam] rows, dead rows at cost −∞."""
    n, b, v = len(words), beam, VOCAB
    rows = n * b
    srcs = [[ref.g2i.get(c, UNK) for c in w] + [2] for w in words]
    emb, hidden = ref.V["enc_emb"], ref.V["enc_w_hh"].shape[1]
    h = np.zeros((n, hidden), np.float32)
    for t in range(max(map(len, srcs))):
        ids = [s[t] if t < len(s) else PAD for s in srcs]
        live = np.array([t < len(s) for s in srcs])[:, None]
        h = np.where(live, ref.cell(emb[ids], h, "enc"), h)
    state = np.repeat(h, b, axis=0)
    limits = [max_len(w, factor) for w in words]
    live = [[((), 0.0)] for _ in range(n)]
    left = [b] * n
    done = [[] for _ in range(n)]
    offsets = np.arange(n)[:, None] * b
    while any(live):
        prev = np.full(rows, BOS)
        cost = np.full(rows, -np.inf)
        for s, hs in enumerate(live):
            for j, (hyp, c) in enumerate(hs):
                prev[s * b + j] = hyp[-1] if hyp else BOS
                cost[s * b + j] = c
        new, lp = ref.step(state, prev)
        total = cost[:, None] + lp
        total[:, UNK] = -np.inf
        vals, idx = top_k_rows(total.reshape(n, b * v), b)
        vals, rows_of, ws = vals.tolist(), (idx // v + offsets).tolist(), (idx % v).tolist()
        origin = np.repeat(np.arange(n) * b, b)
        nxt = [[] for _ in range(n)]
        for s in range(n):
            if not live[s]:
                continue
            ended = 0
            for j in range(left[s]):
                c = vals[s][j]
                if c == -np.inf:
                    break
                r, w = rows_of[s][j], ws[s][j]
                hyp = live[s][r - s * b][0] + (w,)
                if w == EOS or len(hyp) >= limits[s]:
                    done[s].append((score(c, len(hyp), normalize, word_penalty), c, hyp))
                    ended += 1
                else:
                    origin[s * b + len(nxt[s])] = r
                    nxt[s].append((hyp, c))
            left[s] -= ended
            del nxt[s][left[s]:]
        live = nxt
        state = new[origin]
    for d in done:
        d.sort(key=lambda x: -x[0])
    return done


# --- running it ---------------------------------------------------------------------------

def _run_words(args):
    words, beam = args
    return [decode_word(w, beam) for w in words]


def _run_batch(args):
    words, beam = args
    return decode_batch(words, beam)


def chunks(words, mini_batch, sort):
    order = sorted(range(len(words)), key=lambda i: -len(words[i])) if sort else list(range(len(words)))
    return [order[i:i + mini_batch] for i in range(0, len(order), mini_batch)]


def decode_all(words, beam, batched, pool, mini_batch=16):
    """Finished hypotheses per word, in input order."""
    parts = chunks(words, mini_batch, sort=batched)
    fn = _run_batch if batched else _run_words
    jobs = [([words[i] for i in p], beam) for p in parts]
    outs = pool.map(fn, jobs, chunksize=1) if pool else [fn(j) for j in jobs]
    res = [None] * len(words)
    for p, o in zip(parts, outs):
        for i, d in zip(p, o):
            res[i] = d
    return res


def time_numpy(words, beam, threads, batched, reps):
    pool = multiprocessing.get_context("fork").Pool(threads) if threads > 1 else None
    try:
        first = decode_all(words, beam, batched, pool)  # warm-up, and the outputs
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            decode_all(words, beam, batched, pool)
            ts.append(time.perf_counter() - t)
    finally:
        if pool:
            pool.close()
            pool.join()
    return statistics.median(ts), first


def read_kiln_nbest(path):
    """{beam: {word: [(phoneme string, cost, score)]}} from the bench binary's --nbest file."""
    out = {}
    with open(path) as f:
        for line in f:
            beam, word, _rank, ph, cost, sc = line.rstrip("\n").split("\t")
            out.setdefault(int(beam), {}).setdefault(word, []).append((ph, float(cost), float(sc)))
    return out


PHONEMES = ["AA0", "AA1", "AA2", "AE0", "AE1", "AE2", "AH0", "AH1", "AH2", "AO0", "AO1", "AO2",
            "AW0", "AW1", "AW2", "AY0", "AY1", "AY2", "B", "CH", "D", "DH", "EH0", "EH1", "EH2",
            "ER0", "ER1", "ER2", "EY0", "EY1", "EY2", "F", "G", "HH", "IH0", "IH1", "IH2", "IY0",
            "IY1", "IY2", "JH", "K", "L", "M", "N", "NG", "OW0", "OW1", "OW2", "OY0", "OY1",
            "OY2", "P", "R", "S", "SH", "T", "TH", "UH0", "UH1", "UH2", "UW", "UW0", "UW1", "UW2",
            "V", "W", "Y", "Z", "ZH"]  # g2p-en's output symbols after <pad> <unk> <s> </s>


def as_kiln_line(hyp):
    """The bench binary's spelling of a hypothesis: phonemes without </s>, ` <cut>` if forced."""
    ph = " ".join(PHONEMES[w - 4] if w >= 4 else ["<pad>", "<unk>", "<s>", "</s>"][w]
                  for w in hyp if w != EOS)
    return ph if hyp[-1] == EOS else ph + " <cut>"


def agreement(kiln, numpy_out, words):
    """(1-best equal, n-best lists equal (same hypotheses, same order), max |Δcost| over
    matching hypotheses), as counts over the words."""
    best = full = 0
    dmax = 0.0
    for w, d in zip(words, numpy_out):
        k = kiln.get(w, [])
        nb = [(as_kiln_line(h), c) for _, c, h in d]
        if k and nb and k[0][0] == nb[0][0]:
            best += 1
        if [x[0] for x in k] == [x[0] for x in nb]:
            full += 1
            dmax = max([dmax] + [abs(a[1] - b[1]) for a, b in zip(k, nb)])
    return best, full, dmax


def fmt(x, digits=0):
    return "-" if x is None else f"{x:,.{digits}f}"


def cpu_jiffies():
    """(busy, all) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def own_cpu_s():
    """CPU seconds used by this process and its waited-for children (kiln, pool workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Others:
    """How busy the rest of the machine was while a measurement ran (other users' builds make
    2-core timings noisy): average cores used by processes other than this benchmark."""

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK")

    def __enter__(self):
        self.j0, self.o0, self.t0 = cpu_jiffies()[0], own_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        busy = (cpu_jiffies()[0] - self.j0) / self.hz - (own_cpu_s() - self.o0)
        self.cores = max(0.0, busy) / (time.perf_counter() - self.t0)


def wait_quiet(max_wait=120.0, below=0.25):
    """Waits (at most max_wait seconds) for a second in which other processes use less than
    `below` cores; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_wait:
        with Others() as o:
            time.sleep(1.0)
        if o.cores < below:
            break
    return time.perf_counter() - t0


def run_kiln(kiln_bin, beam, threads, limit, reps, nbest):
    args = [kiln_bin, "--beams", str(beam), "--threads", str(threads), "--limit", str(limit),
            "--reps", str(reps)] + (["--nbest", nbest] if nbest else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def main():
    quick = "--quick" in sys.argv
    kiln_bin = sys.argv[sys.argv.index("--kiln") + 1] if "--kiln" in sys.argv else None
    limit = 200 if quick else 1000
    reps = 2 if quick else 5
    with open(WORDS) as f:
        words = [w.strip() for w in f if w.strip()][:limit]
    beams, threads = [1, 4, 12], [1, 2]
    tmp = tempfile.mkdtemp(prefix="kiln-beam-bench-")

    # One setting at a time, kiln and both numpy programs back to back, so that they see the
    # same machine. Other users' builds on a 2-core machine change the timings by the minute:
    # each program's run records the cores other processes used meanwhile, and a setting is
    # measured again (at most `tries` times, keeping the quietest) while any of the three saw
    # more than a quarter of a core of others' load.
    tries = 1 if quick else 3
    kiln, res, outs, kiln_nbest, others = {}, {}, {}, {}, {}
    for b in beams:
        for t in threads:
            best = None
            for _ in range(tries):
                wait_quiet()
                got, load = {}, []
                if kiln_bin:
                    nbest = os.path.join(tmp, f"kiln-nbest-{b}.tsv") if t == 1 else None
                    with Others() as o:
                        got["kiln"] = run_kiln(kiln_bin, b, t, limit, reps, nbest)
                    load.append(o.cores)
                    if nbest:
                        kiln_nbest[b] = read_kiln_nbest(nbest).get(b, {})
                for batched in (False, True):
                    with Others() as o:
                        got[batched] = time_numpy(words, b, t, batched, reps)
                    load.append(o.cores)
                if best is None or max(load) < max(best[1]):
                    best = (got, load)
                if max(load) < 0.25:
                    break
            got, load = best
            others[(b, t)] = load
            if "kiln" in got:
                kiln[(b, t)] = got["kiln"]
                print(json.dumps(got["kiln"]), file=sys.stderr)
            for batched in (False, True):
                secs, first = got[batched]
                res[(batched, b, t)] = len(words) / secs
                if t == 1:
                    outs[(batched, b)] = first
                print(json.dumps({"workload": "g2p_beam",
                                  "impl": "numpy_batched" if batched else "numpy",
                                  "beam": b, "threads": t, "words": len(words), "reps": reps,
                                  "median_s": round(secs, 6),
                                  "words_per_s": round(len(words) / secs, 1)}), file=sys.stderr)

    shutil.rmtree(tmp, ignore_errors=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; numpy {np.__version__}; {len(words)} words "
          f"(benches/data/g2p_words.txt), median of {reps} runs after a warm-up; kiln "
          f"mini-batches of 16 words")
    print()
    hdr = ["beam", "threads", "kiln words/s", "numpy words/s", "kiln ÷ numpy",
           "numpy batched words/s", "kiln ÷ numpy batched", "kiln compiles / 1k words",
           "others' load (cores)"]
    rows = []
    for b in beams:
        for t in threads:
            k = kiln.get((b, t))
            kw = k["words_per_s"] if k else None
            npw, npb = res[(False, b, t)], res[(True, b, t)]
            rows.append([str(b), str(t), fmt(kw), fmt(npw), f"{kw / npw:.2f}" if kw else "-",
                         fmt(npb), f"{kw / npb:.2f}" if kw else "-",
                         f"{k['compiles_per_1000_words']:.0f} (timed runs: {k['compiles_timed']})"
                         if k else "-", " / ".join(f"{x:.2f}" for x in others[(b, t)])])
    widths = [max(len(r[i]) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "| " + " | ".join(c.ljust(wd) for c, wd in zip(r, widths)) + " |"  # noqa: E731
    print(line(hdr))
    print("|" + "|".join("-" * (wd + 2) for wd in widths) + "|")
    for r in rows:
        print(line(r))
    print()
    print("kiln ÷ numpy: words/s ratio (> 1: kiln faster). numpy: one word at a time, its live beam "
          "rows through one GRU step; numpy batched: 16 words × beam rows per step (kiln's layout). "
          "numpy 2 threads = 2 processes. kiln compiles: graph-cache misses decoding the list "
          "from an empty cache, per 1,000 words (timed runs: misses in all timed runs). others' "
          "load: cores used by other processes meanwhile (kiln / numpy / numpy batched).")
    print()
    print("agreement of the outputs (n-best lists: every finished hypothesis, in rank order):")
    for b in beams:
        per_word, batched = outs[(False, b)], outs[(True, b)]
        pb = sum(1 for x, y in zip(per_word, batched)
                 if [h for _, _, h in x] == [h for _, _, h in y])
        msg = f"  beam {b:2}: numpy per-word vs batched n-best equal {pb}/{len(words)}"
        if kiln:
            best, full, dmax = agreement(kiln_nbest.get(b, {}), per_word, words)
            msg += (f"; kiln vs numpy 1-best equal {best}/{len(words)}, n-best equal "
                    f"{full}/{len(words)}, max |Δ log-prob| {dmax:.1e}")
        print(msg)


if __name__ == "__main__":
    main()
