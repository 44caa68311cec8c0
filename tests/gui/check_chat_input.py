#!/usr/bin/python3
"""Real-input test of the window's chat: the interactive window on a Llama 3 chat folder (built as
tests/cli/check_chat.py builds it) driven by xdotool.

Type a message into the Controls panel's chat box and press Enter; the reply runs to its end. Type a
second one (the box keeps the focus) and press Enter. The timeline's turn marks (user k / assistant k)
then sit where `kvscope chat --json` on the same folder and messages puts each turn: first_position and
first_position + tokens_appended, and the conversation shows the messages as typed and the CLI's replies. Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "cli")))
from guitest import App, input_main, fail  # noqa: E402
from check_chat import make_chat_folder  # noqa: E402

MESSAGES = ["Hello there", "What is a cat?"]


def inner(a):
    model = make_chat_folder(a.work, "llama3")
    app = App(a.kvscope, a.work, ["--model", model])
    try:
        d = app.wait("first frames", lambda s: s["frames"] > 3)
        max_new = d["state"]["max_new_tokens"]
        for k, m in enumerate(MESSAGES):
            app.type_into("chat message", m)
            app.key("Return")
            d = app.wait("reply %d" % k, lambda s, k=k: s["turns"] == k + 1 and s["steps"] > 0)
        app.screenshot("two chat turns")
    finally:
        app.close()

    turns = os.path.join(a.work, "turns.txt")
    with open(turns, "w", encoding="utf-8") as f:
        f.write("\n".join(MESSAGES) + "\n")
    p = subprocess.run([a.kvscope, "chat", "--model", model, "--turns", turns, "--max-new-tokens", str(max_new), "--json"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("kvscope chat failed: " + p.stderr)
    want = []
    cli = [json.loads(x) for x in p.stdout.splitlines()]
    for t in cli:  # numbered from 1, in the window as in the JSON
        want += ["user %d@%d" % (t["turn"], t["first_position"]),
                 "assistant %d@%d" % (t["turn"], t["first_position"] + t["tokens_appended"])]
    want_chat = "\n".join("user %d: %s\nassistant %d: %s" % (t["turn"], m, t["turn"], t["reply"]) for m, t in zip(MESSAGES, cli))
    if d["texts"].get("chat") != want_chat:
        fail("the conversation reads %r, expected the typed messages and kvscope chat's replies %r" % (d["texts"].get("chat"), want_chat))
    got = d["texts"].get("timeline turns", "")
    if got != " ".join(want):
        fail("timeline turn marks %r, expected %r (kvscope chat --json)" % (got, " ".join(want)))
    if d["state"]["errors"] != 0:
        fail("errors while chatting: %s" % d["state"]["problem"])
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
