"""Writes g2p_words.txt: the 1,000 most frequent words (a-z only, at least 2 letters, seen at
least twice) of the plain-English license texts in /usr/share/common-licenses (Debian's
base-files), in order of frequency (ties: first seen first; files read in sorted order).

The list is committed, so the beam benchmark never needs this script; it records where the
words came from. Run: python3 benches/data/make_words.py
"""
import collections
import glob
import os
import re

counts = collections.Counter()
for path in sorted(glob.glob("/usr/share/common-licenses/*")):
    if os.path.isfile(path):
        with open(path, errors="ignore") as f:
            counts.update(re.findall(r"[a-z]+", f.read().lower()))
words = [w for w, n in counts.most_common() if n >= 2 and len(w) >= 2][:1000]
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "g2p_words.txt")
with open(out, "w") as f:
    f.write("\n".join(words) + "\n")
print("wrote", out, len(words), "words")
