"""The training corpus of the default model: the English fortune cookie files
of Debian's `fortunes` package (plus `fortunes-min`, whose single file is the
same as `fortunes/fortunes`), read from /usr/share/games/fortunes.

Each fortune is one document. Cleaning, all deterministic:
  * overstrike sequences "X\\bY" (old terminal underlining / bold) become "Y";
    other control characters except tab and newline are dropped;
  * lines are unwrapped: a line is joined to the one before it with a space,
    unless either is blank or the line is indented and the one before it is
    not (attributions such as "\\t\\t-- Mark Twain", dialogue, verse), or
    the line starts with "-- "; indentation is removed,
    runs of spaces and tabs become one space, blank lines are kept (one at a
    time), so the model writes sentences rather than 72-column line breaks;
  * leading and trailing blank lines are removed; empty documents are dropped;
  * the files are read as UTF-8 (with replacement of invalid bytes).

Files left out: `ascii-art` (pictures, not sentences), `perl` (mostly
code), `zippy` (deliberate nonsense), `translate-me` (not English), `ethnic`
(ethnic jokes are not what a default model should say). Documents are
returned in a fixed order (file name, then position).

Every 50th document (by that order) is held out for validation.
"""
import os
import re

FORTUNE_DIR = "/usr/share/games/fortunes"
EXCLUDED = {"ascii-art", "perl", "zippy", "translate-me", "ethnic"}
VALID_EVERY = 50

_OVERSTRIKE = re.compile(r".\x08")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACES = re.compile(r"[ \t]+")


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
    out = []  # unwrapped lines; "" marks a blank line
    prev_indented = False
    for raw in text.split("\n"):
        line = _SPACES.sub(" ", raw).strip()
        if not line:
            if out and out[-1]:
                out.append("")
            prev_indented = False
            continue
        indented = raw[:1] in (" ", "\t")
        new_line = (indented and not prev_indented) or line.startswith("-- ")
        if out and out[-1] and not new_line:
            out[-1] += " " + line
        else:
            out.append(line)
        prev_indented = indented
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


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
