#!/usr/bin/python3
"""What an SVG file holds, read with Python's own XML parser (not kvscope's code): the parse fails, and
the script exits 1, on a file that is not well-formed XML. Prints one JSON object for svg.tests.cpp:

  root, width, height, viewBox    the root element's tag (namespace dropped) and attributes
  title                           the text of the root's <title>
  cells                           fills of the <rect>s in the group id="cells", in document order
  cells_image                     the <image id="cells">: x, y, width, height and the embedded PNG's size
  texts                           every <text>'s content, in document order
  polylines                       per <polyline>: stroke and number of points
  ids                             every id in the file

    svg_summary.py FILE.svg
"""
import base64
import json
import struct
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def local(tag):
    return tag[len(NS):] if tag.startswith(NS) else tag


def main():
    root = ET.parse(sys.argv[1]).getroot()
    out = {"root": local(root.tag), "width": root.get("width"), "height": root.get("height"),
           "viewBox": root.get("viewBox"), "title": None, "cells": [], "cells_image": None, "texts": [],
           "polylines": [], "ids": []}
    for child in root:
        if local(child.tag) == "title":
            out["title"] = child.text or ""
    for e in root.iter():
        tag = local(e.tag)
        if e.get("id"):
            out["ids"].append(e.get("id"))
        if tag == "g" and e.get("id") == "cells":
            out["cells"] = [r.get("fill") for r in e if local(r.tag) == "rect"]
        if tag == "image" and e.get("id") == "cells":
            href = e.get("href") or e.get("{http://www.w3.org/1999/xlink}href")
            prefix = "data:image/png;base64,"
            assert href.startswith(prefix), href[:40]
            png = base64.b64decode(href[len(prefix):], validate=True)
            assert png[:8] == b"\x89PNG\r\n\x1a\n", "embedded image is not a PNG"
            w, h = struct.unpack(">II", png[16:24])
            out["cells_image"] = {k: float(e.get(k)) for k in ("x", "y", "width", "height")}
            out["cells_image"].update({"png_width": w, "png_height": h})
        if tag == "text":
            out["texts"].append("".join(e.itertext()))
        if tag == "polyline":
            out["polylines"].append({"stroke": e.get("stroke"), "n_points": len(e.get("points").split())})
    json.dump(out, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
