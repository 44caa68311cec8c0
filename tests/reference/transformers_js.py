"""transformers.js's encoder (npm @lenml/tokenizers) on a model folder's tokenizer.json and tokenizer_config.json:
the independent encoder the tokenizer tests compare kvscope's ids with.

    encode(node_modules, folder, texts, add_special_tokens=True) -> one id list per text
"""
import json
import subprocess

_SCRIPT = (
    "const fs = require('fs'); const path = require('path');"
    "const { TokenizerLoader } = require(path.join(process.argv[1], '@lenml', 'tokenizers'));"
    "const dir = process.argv[2]; const special = process.argv[3] === '1';"
    "const t = TokenizerLoader.fromPreTrained({tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),"
    " tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'))});"
    "const texts = JSON.parse(fs.readFileSync(0, 'utf8'));"
    "console.log(JSON.stringify(texts.map((x) => t.encode(x, {add_special_tokens: special}))));")


def encode(node_modules, folder, texts, add_special_tokens=True):
    r = subprocess.run(["node", "-e", _SCRIPT, node_modules, folder, "1" if add_special_tokens else "0"],
                       input=json.dumps(texts), capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("transformers.js failed: " + r.stderr.strip())
    return json.loads(r.stdout)
