"""A stand-in for the few pieces of Hugging Face `transformers` that llama.cpp's convert_hf_to_gguf.py uses
on a byte-level BPE folder (tools/llama_cpp_check.sh puts this folder on PYTHONPATH; Debian has no
transformers and this machine no PyPI). Nothing here is kvscope's code.

    AutoTokenizer.from_pretrained(folder)   reads tokenizer.json + tokenizer_config.json
      .vocab / get_vocab()                  model vocabulary and added tokens, text -> id (as a fast tokenizer)
      .vocab_size                           the model vocabulary without added tokens
      .added_tokens_decoder                 id -> AddedToken(content, special, normalized)
      .get_added_vocab()                    added token text -> id
      .encode(text, add_special_tokens)     ids from transformers.js (npm @lenml/tokenizers), the encoder
      .decode(ids)                          kvscope's tokenizer tests compare with; KVSCOPE_NODE_MODULES names its
                                            node_modules folder

The converter names the pre-tokenizer by hashing encode() of a check text, so the name it writes also checks
this encoder on that text: a wrong encoding gives an unknown hash (the converter stops) or another model's
(leaving out Llama 3's BOS gives Smaug's "smaug-bpe", which kvscope then refuses by name).
"""
import atexit
import json
import os
import subprocess

__version__ = "0.0-kvscope-stand-in"

# One node process per tokenizer answers one JSON request per line: {"encode": text, "special": bool}
# or {"decode": ids}.
_SERVER = r"""
const fs = require('fs'); const path = require('path'); const readline = require('readline');
const { TokenizerLoader } = require(path.join(process.argv[1], '@lenml', 'tokenizers'));
const dir = process.argv[2];
const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
const t = TokenizerLoader.fromPreTrained({tokenizerJSON: read('tokenizer.json'),
                                          tokenizerConfig: read('tokenizer_config.json')});
readline.createInterface({input: process.stdin}).on('line', (line) => {
  const q = JSON.parse(line);
  const a = ('encode' in q) ? t.encode(q.encode, {add_special_tokens: q.special}) : t.decode(q.decode);
  process.stdout.write(JSON.stringify(a) + '\n');
});
"""


class AddedToken:
    def __init__(self, content, special, normalized):
        self.content, self.special, self.normalized = content, special, normalized

    def __repr__(self):
        return f"AddedToken({self.content!r}, special={self.special}, normalized={self.normalized})"


class _Tokenizer:
    is_fast = True

    def __init__(self, folder):
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        if tj["model"]["type"] != "BPE":
            raise ValueError(f"{folder}: the transformers stand-in reads BPE tokenizer.json files only")
        self._base = dict(tj["model"]["vocab"])
        self.vocab_size = len(self._base)
        self.added_tokens_decoder = {int(a["id"]): AddedToken(a["content"], bool(a.get("special", False)),
                                                              bool(a.get("normalized", True)))
                                     for a in tj.get("added_tokens", [])}
        self.vocab = dict(self._base)
        for i, a in self.added_tokens_decoder.items():
            self.vocab[a.content] = i
        modules = os.environ.get("KVSCOPE_NODE_MODULES")
        if not modules or not os.path.isdir(os.path.join(modules, "@lenml", "tokenizers")):
            raise RuntimeError("transformers stand-in: set KVSCOPE_NODE_MODULES to a node_modules folder holding "
                               "@lenml/tokenizers (tools/npm/install.sh DEST puts one in DEST/node_modules)")
        self._node = subprocess.Popen(["node", "-e", _SERVER, modules, os.path.abspath(folder)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")
        atexit.register(self._close)

    def _close(self):
        if self._node.poll() is None:
            self._node.stdin.close()
            self._node.wait()

    def _ask(self, request):
        self._node.stdin.write(json.dumps(request) + "\n")
        self._node.stdin.flush()
        line = self._node.stdout.readline()
        if not line:
            raise RuntimeError("transformers stand-in: the node tokenizer process stopped")
        return json.loads(line)

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return {a.content: i for i, a in sorted(self.added_tokens_decoder.items())}

    def encode(self, text, add_special_tokens=True):
        return self._ask({"encode": text, "special": bool(add_special_tokens)})

    def decode(self, ids):
        return self._ask({"decode": [int(i) for i in ids]})


class AutoTokenizer:
    @staticmethod
    def from_pretrained(folder, **kwargs):
        del kwargs  # cache_dir, local_files_only, trust_remote_code: a local folder is all there is
        return _Tokenizer(str(folder))
