#!/usr/bin/python3
"""`kvscope generate` on a terminal: the progress bar says what runs (the prefill shows before it
starts) and is gone before the result is printed, so the result line starts with the prompt.

    check_terminal_output.py --kvscope BIN

stdout and stderr both go to one pseudo-terminal, as in a shell; the screen is rebuilt from what was
written (carriage return, erase-to-end-of-line) the way a terminal shows it.
"""
import argparse
import os
import pty
import re
import subprocess
import sys

PROMPT = "The cat sat on the"


def screen(raw):
    """The lines a terminal shows for `raw` (handles \\r, \\n and ESC [ K; other escapes are kept)."""
    lines, line, col, i = [], [], 0, 0
    while i < len(raw):
        c = raw[i]
        if raw.startswith("\x1b[K", i):
            del line[col:]
            i += 3
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            lines.append("".join(line))
            line, col = [], 0
        else:
            if col < len(line):
                line[col] = c
            else:
                line.append(c)
            col += 1
        i += 1
    if line:
        lines.append("".join(line))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    a = ap.parse_args()
    master, slave = pty.openpty()
    p = subprocess.Popen([a.kvscope, "generate", "--prompt", PROMPT, "--max-new-tokens", "12"],
                         stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    rc = p.wait(timeout=120)
    raw = b"".join(chunks).decode("utf-8", "replace")
    shown = screen(raw)
    failures = []
    if rc != 0:
        failures.append(f"exit {rc}")
    if not re.search(r"prefill \d+ of \d+ prompt tokens", raw):
        failures.append("the progress bar never said the prefill was running")
    results = [l for l in shown if PROMPT in l]
    if not results:
        failures.append("no line with the prompt's text")
    for l in results:
        if not l.startswith(PROMPT):
            failures.append(f"the result line does not start with the prompt (progress bar not cleared): {l!r}")
    if any("generate [" in l for l in shown):
        failures.append("a progress bar is still on the screen at the end")
    if failures:
        print("FAIL: " + "; ".join(failures))
        print("screen:\n" + "\n".join(shown))
        return 1
    print(f"ok: {len(shown)} lines on the screen, the result line starts with the prompt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
