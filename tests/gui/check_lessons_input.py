#!/usr/bin/python3
"""Real-input test of the Lesson panel: `kvscope gui --lesson 1` under Xvfb, its buttons clicked with xdotool.

  1. the window opens on lesson 1, step 1, its check waiting (nothing ran yet) and Next disabled: a click
     on Next changes nothing;
  2. "Do it for me" runs the step (one prefill step in the session), the check line turns to "Check passed"
     with the prompt's token count (`kvscope tokenize`), and Next goes on to step 2 of 3;
  3. step 2 and 3 the same way (Do it for me, Next, then Finish): "Lesson done.";
  4. Close: no lesson open.

Needs xvfb-run, xdotool, ImageMagick's import. Usage:
  check_lessons_input.py --kvscope BUILD/app/kvscope --work DIR --assets DIR
"""
import os
import sys

from guitest import App, fail, input_main, prompt_length

PROMPT = "Tom saw the cookie at school. Tom saw the"


def text(d, name):
    return d.get("texts", {}).get(name, "")


def inner(a):
    n_prompt = prompt_length(a.kvscope, os.path.join(a.assets, "default"), PROMPT)
    with App(a.kvscope, a.work, ["--lesson", "1"], size="1280x720") as app:
        d = app.wait_dump("lesson 1 open", lambda d: "step 1 of 3" in text(d, "lesson title") and d["state"]["idle"], frames=3)
        if not text(d, "lesson check").startswith("Waiting"):
            fail("before any step the check is %r, want Waiting" % text(d, "lesson check"))
        app.click("lesson next")  # disabled until the check passes
        d = app.wait_dump("a click on a disabled Next", lambda d: True, frames=3)
        if "step 1 of 3" not in text(d, "lesson title"):
            fail("Next moved on before the check passed: %r" % text(d, "lesson title"))

        app.click("lesson do")
        d = app.wait_dump("Do it for me: the prefill's check passes",
                          lambda d: d["state"]["idle"] and d["state"]["steps"] == 1 and text(d, "lesson check").startswith("Check passed"),
                          frames=2, shown=lambda d: (d["state"]["steps"], text(d, "lesson check")))
        want = "cache rows = %d (the prompt's tokens)" % n_prompt
        if want not in text(d, "lesson check"):
            fail("step 1's check says %r; want %r (kvscope tokenize counts %d)" % (text(d, "lesson check"), want, n_prompt))
        app.click("lesson next")
        app.wait_dump("Next: step 2", lambda d: "step 2 of 3" in text(d, "lesson title"), frames=2)

        for k, steps in ((2, 2), (3, 5)):
            app.click("lesson do")
            app.wait_dump("step %d's check passes" % k,
                          lambda d: d["state"]["idle"] and d["state"]["steps"] == steps and
                          text(d, "lesson check").startswith("Check passed"),
                          frames=2, shown=lambda d: (d["state"]["steps"], text(d, "lesson check")))
            app.click("lesson next")
            if k == 2:
                app.wait_dump("Next: step 3", lambda d: "step 3 of 3" in text(d, "lesson title"), frames=2)
        app.wait_dump("Finish: the lesson is done", lambda d: text(d, "lesson check") == "Lesson done.", frames=2,
                      shown=lambda d: text(d, "lesson check"))
        app.click("lesson close")
        app.wait_dump("Close: no lesson open", lambda d: text(d, "lesson title") == "", frames=2,
                      shown=lambda d: text(d, "lesson title"))
    print("ok: --lesson 1 opens it; Next waits for the check; Do it for me, Next and Finish by mouse; Close")


def main():
    return input_main(__file__, inner)


if __name__ == "__main__":
    sys.exit(main())
