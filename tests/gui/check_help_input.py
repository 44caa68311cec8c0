#!/usr/bin/python3
"""Real-input test of the help overlay: the interactive window under Xvfb, keys sent with xdotool.

ImGui 1.86 keeps only each key's state per frame and has no ImGuiKey for F1 or '?', so the window reads
its shortcuts from GLFW's key and character callbacks (app/gui/widgets/shortcuts.h); this drives them:

  1. F1 opens the overlay ("help" in the layout dump), Escape closes it;
  2. '?' (typed: shift + slash) opens it, F1 closes it;
  3. '?' typed into the prompt box goes into the prompt and leaves the overlay closed (a text box keeps
     its keys);
  4. the Controls panel's "?" button opens it.

Needs xvfb-run, xdotool, ImageMagick's import. Usage:
  check_help_input.py --kvscope BUILD/app/kvscope --work DIR
"""
import sys

from guitest import App, input_main


def shown(d):
    return "help" in d["widgets"]


def inner(a):
    with App(a.kvscope, a.work) as app:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.click_empty()
        app.key("F1")
        app.wait_dump("F1 opens the help", shown, frames=2)
        app.key("Escape")
        app.wait_dump("Escape closes it", lambda d: not shown(d), frames=2)
        app.key("question")
        app.wait_dump("? opens it", shown, frames=2)
        app.key("F1")
        app.wait_dump("F1 closes it", lambda d: not shown(d), frames=2)
        app.type_into("prompt", "why?")
        app.wait("the prompt takes the ?", lambda s: s["prompt"] == "why?")
        app.wait_dump("the help stays closed while typing", lambda d: not shown(d), frames=3)
        app.click_empty()
        app.click("help button")
        app.wait_dump("the ? button opens it", shown, frames=2)
    print("ok: F1, ?, Escape and the ? button open and close the help; a text box keeps its ?")


def main():
    return input_main(__file__, inner, assets=False)


if __name__ == "__main__":
    sys.exit(main())
