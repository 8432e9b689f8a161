"""`attnlab view`'s cost and its page's responsiveness, against the issue's budget: the command on 512 tokens
of SmolLM2 under 30 s on this CPU, the file under 5 MB, a head switch under 100 ms in the browser.

Each chunk size runs the real command in a subprocess (interpreter start, model load, the traced forward, the
replays, the file written: what a user waits for). Then Debian's chromium, driven by playwright, opens the
default page from disk: the time until the page says it is ready (decoded, grid drawn), and the time of each
of ``--switches`` head switches (a click on a random head of the grid, to the frame after the page redrew the
map, the text, the heavy hitters and the replay), as the page itself measures them (``performance.now``).
The screenshot in the README is taken here, after a click, a hover and a slider move.

    python benchmarks/bench_view.py --out benchmarks/results/bench-view     # ~1 min on 2 cores
"""
from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlab.view.defaults import MAX_TOKENS

from host import (  # benchmarks/host.py
    add_out,
    corpus,
    model_name,
    need_tool,
    number,
    parser,
    positive_int,
    positive_ints,
    recorded,
)

BUDGET = {"seconds": 30.0, "megabytes": 5.0, "switch_ms": 100.0}  # the issue's


def run_view(args, chunk: int, out: Path) -> dict:
    cmd = ["attnlab", "view", "--model", args.model, "--text-file", args.text, "--tokens", str(args.tokens),
           "--chunk", str(chunk), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    return {"chunk": chunk, "command": " ".join(cmd[:-1] + ["view.html"]), "seconds": round(seconds, 1),
            "megabytes": round(out.stat().st_size / 1e6, 2)}


def browse(page_file: Path, switches: int, shot: Path | None) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t0 = time.perf_counter()
        page.goto(page_file.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=120_000)
        ready = time.perf_counter() - t0
        version = browser.version
        layers, heads = page.evaluate("[window.attnlab.data.layers, window.attnlab.data.heads]")
        rng = random.Random(0)
        for k in range(switches):
            page.click(f"#grid canvas[data-layer='{rng.randrange(layers)}'][data-head='{rng.randrange(heads)}']")
            page.wait_for_function(f"window.attnlab.timings.length >= {k + 2}")  # the load's own switch is first
        times = page.evaluate("window.attnlab.timings")[1:]
        if shot is not None:  # a head with a clear pattern, a token's row, the H2O replay half way
            page.click(f"#grid canvas[data-layer='{layers // 2}'][data-head='1']")
            page.select_option("#policy", index=2)
            page.focus("#step")
            page.keyboard.press("Home")
            for _ in range(int(page.get_attribute("#step", "max")) // 2):
                page.keyboard.press("ArrowRight")
            page.hover("#tokens span[data-i='200']")
            page.screenshot(path=str(shot), full_page=True)
        browser.close()
    return {"browser": f"chromium {version}", "ready_s": round(ready, 2), "switches": len(times),
            "switch_ms_median": round(statistics.median(times), 1),
            "switch_ms_p90": round(sorted(times)[int(0.9 * (len(times) - 1))], 1),
            "switch_ms_max": round(max(times), 1)}


def verdict(value: float, limit: float) -> str:
    return "met" if value < limit else "not met"


def main(argv=None) -> None:
    p = parser(__doc__)
    p.add_argument("--model", type=model_name, default="smollm2")
    p.add_argument("--text", type=corpus(), default="wikitext-2/test.txt")
    p.add_argument("--tokens", type=number(int, f"[1, {MAX_TOKENS}]"), default=512)
    p.add_argument("--chunks", type=positive_ints, default="8,1",
                   help="replay step sizes to time; the first is the one browsed")
    p.add_argument("--switches", type=positive_int, default=60, help="head switches timed in the browser")
    add_out(p)
    args = p.parse_args(argv)
    # the browser comes last: missing, it would fail after every view was built and timed
    need_tool(p, "chromium", "install Debian's chromium (apt install chromium), as .ci/run does")
    need_tool(p, "playwright", "pip install playwright (the test extra); its own browser download is not needed",
              module=True)
    figures: dict = {}
    with recorded(args.out, figures), tempfile.TemporaryDirectory() as tmp:
        runs = [run_view(args, c, Path(tmp) / f"view-{c}.html") for c in args.chunks]
        shot = args.out / "view.png" if args.out else None
        if shot:
            args.out.mkdir(parents=True, exist_ok=True)
        page = browse(Path(tmp) / f"view-{runs[0]['chunk']}.html", args.switches, shot)
        figures.update(model=args.model, text=args.text, tokens=args.tokens, runs=runs, page=page, budget=BUDGET)
        print(f"attnlab view, {args.tokens} tokens of {args.text}, {args.model}:\n")
        print("| --chunk | wall time (s) | file (MB) | under 30 s | under 5 MB |\n|---:|---:|---:|---|---|")
        for r in runs:
            print(f"| {r['chunk']} | {r['seconds']} | {r['megabytes']} | {verdict(r['seconds'], BUDGET['seconds'])} "
                  f"| {verdict(r['megabytes'], BUDGET['megabytes'])} |")
        print(f"\nchromium: ready {page['ready_s']} s after opening; {page['switches']} head switches: median "
              f"{page['switch_ms_median']} ms, p90 {page['switch_ms_p90']} ms, max {page['switch_ms_max']} ms "
              f"(under 100 ms: {verdict(page['switch_ms_max'], BUDGET['switch_ms'])} for every switch)")
    sys.exit(0)


if __name__ == "__main__":
    main()
