"""A stand-in for the `sentencepiece` module, which llama.cpp's gguf-py imports at the top of gguf/vocab.py and
convert_hf_to_gguf.py imports before it looks for tokenizer.model. The folders tools/llama_cpp_check.sh
converts have no tokenizer.model (byte-level BPE only), so the converter never builds one: if it tries,
it stops here saying so.
"""


class SentencePieceProcessor:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("sentencepiece stand-in: this check converts byte-level BPE folders only "
                           "(no tokenizer.model); install the real sentencepiece for others")
