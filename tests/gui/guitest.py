"""What the GUI test scripts share (tests/gui.cmake runs them with /usr/bin/python3).

  fail(msg)                    print "FAIL: msg" and exit 1: every failure is one line a reader can act on
  skip(msg)                    print "SKIP: msg" and exit 77 (ctest reports the test as skipped)
  run(cmd)                     run a command; fail with its output unless it exits 0 (expect_ok=False: return it)
  arguments(assets, model)     --kvscope BIN --work DIR [--assets DIR] [--model DIR]; the work folder emptied,
                               kvscope and paths made absolute; skips without xvfb-run
  xvfb(size)                   the xvfb-run prefix for a screen 100 pixels larger than a (w, h) window
  script(kvscope, work, name, lines, size, ...)
                               `kvscope gui --script WORK/NAME.txt --size WxH [--screenshot WORK/NAME.png]
                               [--layout-dump WORK/NAME.json]` under Xvfb; returns the finished process
  window(kvscope, model, work, name, size, lines)
                               script() on a model, returning the final frame's layout dump
  error_lines(p)               the non-empty lines of p's stderr, without xvfb-run's own notes (now and then
                               "xvfb-run: error: problem while cleaning up temporary directory")
  read_json(path), read_png(path)
                               a JSON file; a PNG as a (H, W, 3) uint8 RGB array
  prompt_length(kvscope, model, text)
                               tokens `kvscope tokenize` gives for text
  chart(dump, name)            a chart's dump (app/gui/widgets/chart.h): plot rectangle, x and y ticks as
                               (value, label, pixel), series {label: [(value, pixel_y)]}, legend boxes
  check_chart(dump, name, label_value)
                               fails unless the chart has two or more ticks on each axis, in order, inside its
                               plot, each label reading its value (label_value(label) on the value axis), the pixels an affine
                               image of the values, and every plotted point where the value ticks put it
  gemma3_folder(assets, work)  WORK/gemma3: a Gemma 3 folder of tools/make_llama_model.py's gemma3-tiny shape
                               (vocab 768, seed 31) with assets/llama-gqa's tokenizer; the CLI scripts use it too

Real-input tests (xdotool, the interactive window):
  App(kvscope, work, ...)      starts `kvscope gui` and drives it with X events; see its methods
  input_main(script, inner, assets=True, screen=SCREEN, timeout=600)
                               main() of a real-input test: reruns the script under its own Xvfb screen with
                               --inner, where inner(args) runs; returning None from inner prints OK
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SCREEN = "1700x1100x24"  # real-input tests: the X screen and the window on it
SIZE = "1600x1000"
TIMEOUT = 60.0  # seconds for any one action to show up (software GL on a shared 2-core machine)


def fail(msg):
    print("FAIL: " + msg)
    sys.stdout.flush()
    sys.exit(1)


def skip(msg):
    print("SKIP: " + msg)
    sys.stdout.flush()
    sys.exit(77)


def run(cmd, timeout=240, env=None, expect_ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if expect_ok and p.returncode != 0:
        fail("command failed (%d): %s\nstdout: %s\nstderr: %s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def arguments(assets=True, model=False):
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    if assets:
        ap.add_argument("--assets", required=True)
    if model:
        ap.add_argument("--model", required=True)
    a = ap.parse_args()
    if shutil.which("xvfb-run") is None:
        skip("xvfb-run not found (apt install xvfb)")
    for name in ("kvscope", "work", "assets", "model"):
        if getattr(a, name, None):
            setattr(a, name, os.path.abspath(getattr(a, name)))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    return a


def xvfb(size):
    w, h = size
    return ["xvfb-run", "-a", "-s", "-screen 0 %dx%dx24" % (w + 100, h + 100)]


def script(kvscope, work, name, lines, size, model=None, dump=True, shot=True, args=(), env=None, timeout=240,
           expect_ok=True):
    """Runs `lines` as a script; NAME.txt, (shot) NAME.png and (dump) NAME.json are left in `work`."""
    path = os.path.join(work, name + ".txt")
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    cmd = xvfb(size) + [kvscope, "gui"] + (["--model", model] if model else []) + [
        "--script", path, "--size", "%dx%d" % size]
    if shot:
        cmd += ["--screenshot", os.path.join(work, name + ".png")]
    if dump:
        cmd += ["--layout-dump", os.path.join(work, name + ".json")]
    return run(cmd + list(args), timeout=timeout, env=env, expect_ok=expect_ok)


def window(kvscope, model, work, name, size, lines):
    script(kvscope, work, name, lines, size, model=model)
    return read_json(os.path.join(work, name + ".json"))


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("xvfb-run:")]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (path, e))


def read_png(path):
    import numpy as np
    from PIL import Image
    try:
        return np.asarray(Image.open(path).convert("RGB"))
    except OSError as e:
        fail("cannot read %s: %s" % (path, e))


def prompt_length(kvscope, model, text):
    return len(run([kvscope, "tokenize", "--model", model, "--text", text], timeout=60).stdout.split())


def chart(d, name):
    t, w = d.get("texts", {}), d.get("widgets", {})
    if name + " plot" not in w:
        fail("no chart %r in the layout dump (charts: %s)" % (name, sorted(k[:-5] for k in w if k.endswith(" plot"))))

    def ticks(text):
        return [(float(v), label, float(px)) for v, label, px in (x.split("|") for x in text.split("; "))] if text else []

    series = {}
    for line in t.get(name + " series", "").splitlines():
        label, _, points = line.partition(":")
        series[label] = [(float(v), float(py)) for v, py in (x.split("@") for x in points.split())]
    legend = {k[len(name) + 8:]: r for k, r in w.items() if k.startswith(name + " legend ")}
    return {"plot": w[name + " plot"], "x": ticks(t.get(name + " x ticks", "")), "y": ticks(t.get(name + " y ticks", "")),
            "series": series, "legend": legend}


def check_chart(d, name, label_value=float):  # label_value reads the value axis's labels
    import numpy as np
    c = chart(d, name)
    x0, y0, x1, y1 = c["plot"]
    for axis, lo, hi, along in (("x", x0, x1, 1), ("y", y0, y1, -1)):
        ts = c[axis]
        if len(ts) < 2:
            fail("%s: %d %s ticks %s, want two or more" % (name, len(ts), axis, ts))
        values, pixels = np.array([v for v, _, _ in ts]), np.array([p for _, _, p in ts])
        if np.any(np.diff(values) <= 0) or np.any(along * np.diff(pixels) <= 0):
            fail("%s: %s ticks out of order %s" % (name, axis, ts))
        if pixels.min() < lo - 1 or pixels.max() > hi + 1:
            fail("%s: %s ticks %s outside the plot [%s, %s]" % (name, axis, list(pixels), lo, hi))
        for v, label, _ in ts:
            read = label_value(label) if axis == "y" else float(label)
            if abs(read - v) > 1e-6 * max(1.0, abs(v)):
                fail("%s: %s tick %r reads %s, its value is %s" % (name, axis, label, read, v))
        slope, icpt = np.polyfit(values, pixels, 1)
        if np.max(np.abs(pixels - (slope * values + icpt))) > 0.6:
            fail("%s: %s tick pixels %s are not an affine image of their values %s" % (name, axis, list(pixels), list(values)))
        c[axis + "_map"] = (slope, icpt)
    slope, icpt = c["y_map"]
    for label, points in c["series"].items():
        for v, py in points:
            want = min(max(slope * v + icpt, y0), y1)  # a value off the axis is drawn at its edge
            if abs(py - want) > 1.0:
                fail("%s: series %r value %g drawn at y %.1f, where the ticks put it: %.1f" % (name, label, v, py, want))
    return c


def gemma3_folder(assets, work):
    sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
    import make_llama_model
    model = os.path.join(work, "gemma3")
    make_llama_model.write(model, **dict(make_llama_model.SHAPES["gemma3-tiny"], vocab=768, seed=31))
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(assets, "llama-gqa", f), model)
    return model


class App:
    """The interactive window under the current X display. Widgets are found by name in the JSON the app
    keeps updated with --layout-dump (rectangles of named widgets plus state: steps, idle, status, frames)."""

    def __init__(self, kvscope, work, extra_args=(), size=SIZE, config=None):
        """config: the XDG config folder (what the window remembers); default a new empty one. size None: the
        window picks its size (the remembered one, if any)."""
        self.work = work
        self.dump = os.path.join(work, "layout.json")
        # The previous window's dump would answer the first waits of this one (its frames already counted),
        # so a test that opens windows one after another must start each without it.
        if os.path.exists(self.dump):
            os.remove(self.dump)
        self.config = config or tempfile.mkdtemp(prefix="xdg_", dir=work)  # no remembered workspace or window size
        env = dict(os.environ, XDG_CONFIG_HOME=self.config)
        self.log = open(os.path.join(work, "kvscope.log"), "w")
        sized = ["--size", size] if size else []
        self.proc = subprocess.Popen([kvscope, "gui", *sized, "--layout-dump", self.dump, *extra_args], cwd=work, env=env,
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
        """Click where there is no widget (the empty right end of the menu bar): the text box loses focus."""
        x0, y0, x1, y1 = self.state()["windows"]["menu bar"]
        self.xdo(["mousemove", "--window", self.wid, str(int(x1 - 12)), str(int((y0 + y1) / 2))])
        time.sleep(0.15)
        self.xdo(["click", "1"])
        time.sleep(0.2)

    def workspace(self, name):
        """Click workspace `name` in the bar at the top; returns once a frame shows it."""
        self.click("workspace " + name)
        self.wait_dump("workspace %s" % name, lambda d: d["state"].get("workspace") == name, frames=1)

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
        import numpy as np
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
        img = read_png(path).astype(np.int16)
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


def input_main(script_path, inner, assets=True, screen=SCREEN, timeout=600):
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    if assets:
        ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--inner", action="store_true", help="already under Xvfb")
    a = ap.parse_args()
    if a.inner:
        rc = inner(a)
        if rc is None:
            print("OK")
        return rc or 0
    for tool in ("xvfb-run", "xdotool", "import"):
        if not shutil.which(tool):
            skip("%s not found (apt install xvfb xdotool imagemagick)" % tool)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    args = ["--kvscope", os.path.abspath(a.kvscope)] + (["--assets", os.path.abspath(a.assets)] if assets else [])
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 " + screen, sys.executable, os.path.abspath(script_path), "--inner",
           *args, "--work", os.path.abspath(a.work)]
    return subprocess.run(cmd, timeout=timeout).returncode
