"""The training corpus of the default model: the English fortune cookie files
of Debian's `fortunes` package (plus `fortunes-min`, whose single file is the
same as `fortunes/fortunes`), read from /usr/share/games/fortunes.

Each fortune is one document. Cleaning, all deterministic:
  * overstrike sequences "X\\bY" (old terminal underlining / bold) become "Y";
    other control characters except tab and newline are dropped;
  * trailing spaces are removed from every line; leading and trailing blank
    lines are removed; empty documents are dropped;
  * the files are read as UTF-8 (with replacement of invalid bytes).

Files left out: `ascii-art` (pictures, not sentences), `translate-me`
(not English), `ethnic` (ethnic jokes are not what a default model should
say). Documents are returned in a fixed order (file name, then position).

Every 50th document (by that order) is held out for validation.
"""
import os
import re

FORTUNE_DIR = "/usr/share/games/fortunes"
EXCLUDED = {"ascii-art", "translate-me", "ethnic"}
VALID_EVERY = 50

_OVERSTRIKE = re.compile(r".\x08")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def fortune_files(root=FORTUNE_DIR):
    names = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        if name in EXCLUDED:
            continue
        names.append(name)
    if not names:
        raise FileNotFoundError(f"no fortune files in {root}: apt-get install fortunes fortunes-min")
    return names


def clean(text):
    text = _OVERSTRIKE.sub("", text)
    text = _CONTROL.sub("", text)
    lines = [ln.rstrip() for ln in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def read_file(path):
    with open(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    docs = []
    for chunk in re.split(r"^%\n", raw, flags=re.M):
        doc = clean(chunk)
        if doc:
            docs.append(doc)
    return docs


def documents(root=FORTUNE_DIR):
    """[(file name, text)] in a fixed order."""
    out = []
    for name in fortune_files(root):
        for doc in read_file(os.path.join(root, name)):
            out.append((name, doc))
    return out


def split(docs):
    """(train texts, validation texts)."""
    train, valid = [], []
    for i, (_, text) in enumerate(docs):
        (valid if i % VALID_EVERY == VALID_EVERY - 1 else train).append(text)
    return train, valid


if __name__ == "__main__":
    d = documents()
    tr, va = split(d)
    nbytes = sum(len(t.encode()) for t in tr)
    print(f"{len(d)} documents from {len(fortune_files())} files; "
          f"train {len(tr)} ({nbytes} bytes), valid {len(va)}")
