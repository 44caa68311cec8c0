"""A stand-in for `tqdm`, whose progress bar gguf-py's writer draws while it writes tensors (Debian's python3
here has no tqdm): the bar's calls are accepted and nothing is drawn."""


class tqdm:  # noqa: N801 (the real module's name)
    def __init__(self, iterable=None, *args, **kwargs):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        pass

    def set_description(self, desc=None):
        pass

    def reset(self, total=None):
        pass

    def close(self):
        pass
