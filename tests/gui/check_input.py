#!/usr/bin/python3
"""Real-input GUI test: start `kvscope gui` (the interactive window, not the script mode) under Xvfb and
drive it with X events from xdotool, as a new user would:

  type a prompt into the prompt box, click "Prefill step", press Space (decode), Backspace (step back),
  click the cache switch, press Space again (a cache-off step), tap Space and Backspace faster than a
  frame while both cores are busy (each press applies, in order), click the layer / head arrows, hover
  the attention map (a decoder-only model's tooltip says "layer", not "decoder layer"), type an export
  folder and click "Export snapshot".

Widgets are found by name in the JSON the app keeps updated with --layout-dump FILE (rectangles of named
widgets plus a little state: steps, idle, cache, layer, head, status, frame counter), so no pixel
coordinates are hard-coded. After every action the test checks

  1. the app state moved as the action asks (steps, cache switch, layer/head, prompt text);
  2. a screenshot of the X screen (ImageMagick `import -window root`) changed;
  3. the frame counter keeps advancing (the window is not frozen);
and at the end that the export folder holds the right step (meta.json step and cache flag, files of the
selected layer/head) and that its logits equal `kvscope generate --dump-logits` for the same prompt
(the CLI path: an independent run of the engine, no GUI involved).

Needs xvfb-run, xdotool, ImageMagick's import, /usr/bin/python3 with numpy and PIL. Usage:
  check_input.py --kvscope BUILD/app/kvscope --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

PROMPT = "The quick brown fox jumps over"
SCREEN = "1700x1100x24"
SIZE = "1600x1000"
TIMEOUT = 60.0  # seconds for any one action to show up (software GL on a shared 2-core machine)


def fail(msg):
    print("FAIL: " + msg)
    sys.stdout.flush()
    sys.exit(1)


class App:
    def __init__(self, kvscope, work, extra_args=(), size=SIZE):
        self.work = work
        self.dump = os.path.join(work, "layout.json")
        self.config = tempfile.mkdtemp(prefix="xdg_", dir=work)  # no saved imgui.ini can move the panels
        env = dict(os.environ, XDG_CONFIG_HOME=self.config)
        self.log = open(os.path.join(work, "kvscope.log"), "w")
        self.proc = subprocess.Popen([kvscope, "gui", "--size", size, "--layout-dump", self.dump, *extra_args], cwd=work, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        out = self.xdo(["search", "--sync", "--onlyvisible", "--name", "kvscope"], timeout=TIMEOUT)
        self.wid = out.split()[0]
        self.shots = 0
        self.last_shot = None

    def xdo(self, args, timeout=20):
        p = subprocess.run(["xdotool"] + args, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            fail("xdotool %s failed: %s" % (" ".join(args), p.stderr.strip()))
        return p.stdout

    def state(self):
        try:
            with open(self.dump) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def wait(self, what, pred, timeout=TIMEOUT):
        """Poll the dump until pred(state) holds and the worker is idle; fail with the last state otherwise."""
        t0 = time.time()
        d = self.wait_dump(what, lambda d: d["state"]["idle"] and pred(d["state"]), timeout)
        print("  ok: %-34s (%.2f s) status: %s" % (what, time.time() - t0, d["state"]["status"]))
        return d

    def wait_dump(self, what, pred, timeout=TIMEOUT, frames=0, shown=lambda d: d["state"]):
        """Poll the dump until pred(dump) holds in a frame drawn `frames` or more frames after this call;
        fail with shown(last dump) otherwise."""
        f0 = self.frames() if frames else 0
        t0 = time.time()
        d = None
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                fail("kvscope exited (%d) while waiting for: %s" % (self.proc.returncode, what))
            d = self.state()
            if d and d["state"]["frames"] >= f0 + frames and pred(d):
                return d
            time.sleep(0.05)
        fail("timed out after %.0f s waiting for %s; last state %s" % (timeout, what, d and shown(d)))

    def frames(self):
        d = self.state()
        return d["state"]["frames"] if d else 0

    def centre(self, name):
        d = self.state()
        if not d or name not in d["widgets"]:
            fail("widget '%s' not in the layout dump (have: %s)" % (name, d and sorted(d["widgets"])))
        x0, y0, x1, y1 = d["widgets"][name]
        return int((x0 + x1) / 2), int((y0 + y1) / 2)

    def click(self, name):
        x, y = self.centre(name)
        f0 = self.frames()
        self.xdo(["mousemove", "--window", self.wid, str(x), str(y)])
        # Let frames see the hover before the press (ImGui needs the item hovered); count them, as a busy
        # machine can make a fixed sleep too short.
        t0 = time.time()
        while self.frames() < f0 + 2 and time.time() - t0 < 10:
            time.sleep(0.05)
        time.sleep(0.15)
        # Held for a few frames, like keys below: a press and release inside one slow frame can be lost.
        self.press_release()

    def press_release(self):
        f0 = self.frames()
        self.xdo(["mousedown", "1"])
        t0 = time.time()
        while self.frames() < f0 + 2 and time.time() - t0 < 10:
            time.sleep(0.05)
        self.xdo(["mouseup", "1"])
        time.sleep(0.2)

    def click_empty(self):
        """Click where there is no widget (the bottom of the Next token panel): the text box loses focus."""
        x0, y0, x1, y1 = self.state()["widgets"]["Next token"]
        self.xdo(["mousemove", "--window", self.wid, str(int(x0 + 20)), str(int(y1 - 12))])
        time.sleep(0.15)
        self.xdo(["click", "1"])
        time.sleep(0.2)

    def key(self, k):
        # Held for a few frames: ImGui 1.86 polls key state once per frame, so a press and release
        # between two frames would be missed (typed characters are queued and need no such care).
        # At least 0.25 s and two frames: on a loaded machine a frame can take longer than that.
        f0 = self.frames()
        self.xdo(["keydown", k])
        time.sleep(0.25)
        t0 = time.time()
        while self.frames() < f0 + 2 and time.time() - t0 < 10:
            time.sleep(0.05)
        self.xdo(["keyup", k])
        time.sleep(0.2)

    def type_into(self, name, text):
        self.click(name)
        self.key("ctrl+a")
        self.xdo(["type", "--delay", "30", text], timeout=60)
        time.sleep(0.3)

    def type_prompt(self, prompt):
        """Type `prompt` into the prompt box; returns once the session has it (no step yet) and the box let go."""
        self.type_into("prompt", prompt)
        self.wait("prompt typed", lambda s: s["prompt"] == prompt and s["steps"] == 0)
        self.click_empty()

    def prefill(self, prompt):
        """Type `prompt` and click "Prefill step"; returns once that step is done."""
        self.type_prompt(prompt)
        self.click("Prefill step")
        self.wait("prefill", lambda s: s["steps"] == 1)

    def screenshot(self, label):
        """Grab the X screen; fail unless it differs from the previous grab."""
        self.shots += 1
        path = os.path.join(self.work, "shot_%02d_%s.png" % (self.shots, label))
        # Two frames after the state changed, so the picture shows it.
        f0 = self.frames()
        t0 = time.time()
        while self.frames() < f0 + 2 and time.time() - t0 < 10:
            time.sleep(0.05)
        p = subprocess.run(["import", "-window", "root", path], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            fail("import failed: %s" % p.stderr.strip())
        img = np.asarray(Image.open(path).convert("RGB")).astype(np.int16)
        if self.last_shot is not None:
            changed = float(np.mean(np.abs(img - self.last_shot).sum(axis=2) > 30))
            print("  screenshot %-26s %6.2f%% of pixels changed" % (os.path.basename(path), 100 * changed))
            if changed < 0.0005:
                fail("the window did not change after '%s' (%s)" % (label, path))
        self.last_shot = img
        return path

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()

    def __enter__(self):  # `with App(...) as app:` closes the window however the block ends
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def inner(a):
    work = a.work
    app = App(a.kvscope, work)
    try:
        print("window %s; layout dump %s" % (app.wid, app.dump))
        app.wait("first frames", lambda s: s["frames"] > 3 and s["prompt"] != "")
        app.screenshot("start")

        app.type_into("prompt", PROMPT)
        app.wait("prompt typed", lambda s: s["prompt"] == PROMPT and s["steps"] == 0)
        app.screenshot("typed")

        app.click_empty()
        app.click("Prefill step")
        app.wait("prefill", lambda s: s["steps"] == 1)
        app.screenshot("prefill")

        app.click_empty()
        app.key("space")
        app.wait("space = decode", lambda s: s["steps"] == 2)
        app.screenshot("decode")

        app.key("BackSpace")
        app.wait("backspace = step back", lambda s: s["steps"] == 1)
        app.screenshot("back")

        app.click("cache switch")
        app.wait("cache switch off", lambda s: not s["cache_on"])
        app.key("space")
        app.wait("space = cache-off decode", lambda s: s["steps"] == 2)
        app.screenshot("cache_off_step")

        # Keys tapped faster than a frame while both cores are busy: each press is applied, in order
        # (ImGui 1.86 alone sees only the key state at each frame and would drop such taps).
        # A burner spins until its parent (this script) is gone, so a killed test leaves no busy process.
        burn = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
        burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
        try:
            app.xdo(["key", "--delay", "0", "space", "BackSpace"])
            app.wait("space+backspace at once", lambda s: s["steps"] == 2 and "stepped back to 2 steps" in s["status"])
            app.xdo(["key", "--delay", "0", "space"])
            app.wait("one quick space", lambda s: s["steps"] == 3)
            app.xdo(["key", "--delay", "0", "BackSpace"])
            app.wait("one quick backspace", lambda s: s["steps"] == 2)
        finally:
            for b in burners:
                b.kill()
                b.wait()

        app.click("layer +")  # the default model has 2 layers and 4 heads
        app.click("head +")
        app.click("head +")
        app.wait("layer 1, head 2", lambda s: s["layer"] == 1 and s["head"] == 2)
        app.screenshot("layer_head")

        # Hovering a cell of the map: the tooltip of a decoder-only model says "layer", not "decoder layer".
        x, y = app.centre("attention map")
        app.xdo(["mousemove", "--window", app.wid, str(x), str(y)])
        t0 = time.time()
        while time.time() - t0 < TIMEOUT and "attention tooltip" not in (app.state() or {}).get("texts", {}):
            time.sleep(0.1)
        tip = (app.state() or {}).get("texts", {}).get("attention tooltip")
        if tip != "layer 1 head 2":
            fail("the attention tooltip reads %r, expected 'layer 1 head 2'" % tip)
        print("  ok: tooltip %r" % tip)
        app.click_empty()

        out = os.path.join(work, "exported")
        app.type_into("export dir", out)
        app.click_empty()
        app.click("Export snapshot")
        app.wait("export snapshot", lambda s: "exported step 1" in s["status"])

        # Frames kept coming the whole time: the loop never stalled.
        f = app.frames()
        time.sleep(1.0)
        if app.frames() <= f:
            fail("the frame counter stopped (%d): the window froze" % f)
    finally:
        app.close()

    # The export: the shown step (1, the cache-off decode) for the selected layer 1 / head 2.
    step_dir = os.path.join(out, "step_0001")
    if not os.path.isdir(step_dir):
        fail("Export snapshot wrote %s, expected step_0001" % (os.listdir(out) if os.path.isdir(out) else "nothing"))
    with open(os.path.join(step_dir, "meta.json")) as f:
        meta = json.load(f)
    if meta["step"] != 1 or meta["phase"] != "decode" or meta["cache_on"]:
        fail("exported meta says step %s %s cache_on=%s, expected step 1 decode with the cache off" % (
            meta["step"], meta["phase"], meta["cache_on"]))
    for name in ("l01_h02_weights.npy", "l01_h02_scores.npy", "l01_h02_mask.npy", "logits.npy"):
        if not os.path.exists(os.path.join(step_dir, name)):
            fail("export lacks %s (has %s)" % (name, sorted(os.listdir(step_dir))))
    weights = np.load(os.path.join(step_dir, "l01_h02_weights.npy"))
    n_prompt = meta["query_positions"][-1]  # the decode query sits at position len(prompt)
    if weights.shape[0] != n_prompt + 1:
        fail("cache-off decode should recompute %d query rows, export has %s" % (n_prompt + 1, weights.shape))
    if not np.allclose(weights.sum(axis=1), 1, atol=1e-5):
        fail("exported weights rows do not sum to 1")
    print("export: %s step %d (%s, cache off), weights %s" % (step_dir, meta["step"], meta["phase"], weights.shape))

    # The numbers equal an independent CLI run of the same prompt (cache on; the cache does not change them).
    dump = os.path.join(work, "generate_logits.npy")
    p = subprocess.run([a.kvscope, "generate", "--prompt", PROMPT, "--max-new-tokens", "2", "--json", "--dump-logits",
                        dump], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr)
    gen = json.loads(p.stdout)
    ref = np.load(dump)  # (2, V)
    got = np.load(os.path.join(step_dir, "logits.npy"))
    worst = float(np.abs(got - ref[1]).max())
    print("logits of the exported step vs kvscope generate: max |d| %.2e; chosen %d vs %d" % (
        worst, meta["chosen"]["id"], gen["generated_ids"][1]))
    if worst > 1e-4 or meta["chosen"]["id"] != gen["generated_ids"][1]:
        fail("the GUI's step differs from kvscope generate")
    print("OK")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--inner", action="store_true", help="already under Xvfb")
    a = ap.parse_args()
    if a.inner:
        return inner(a)
    return rerun_under_xvfb(__file__, a.work, ["--kvscope", os.path.abspath(a.kvscope)])


def rerun_under_xvfb(script, work, args):
    """Run `script --inner args --work WORK` on a fresh X screen (after a clean WORK); skip without the tools."""
    for tool in ("xvfb-run", "xdotool", "import"):
        if not shutil.which(tool):
            print("SKIP: %s not found (apt install xvfb xdotool imagemagick)" % tool)
            return 0
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 " + SCREEN, sys.executable, os.path.abspath(script), "--inner",
           *args, "--work", os.path.abspath(work)]
    return subprocess.run(cmd, timeout=600).returncode


def assets_test_main(script, inner):
    """main() of a real-input test that takes --kvscope and --assets: `inner(args)` runs under Xvfb; it fails
    through fail(), and returning None means it passed (printed as OK)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--inner", action="store_true", help="already under Xvfb")
    a = ap.parse_args()
    if a.inner:
        rc = inner(a)
        if rc is None:
            print("OK")
        return rc or 0
    return rerun_under_xvfb(script, a.work, ["--kvscope", os.path.abspath(a.kvscope), "--assets", os.path.abspath(a.assets)])


if __name__ == "__main__":
    sys.exit(main())
