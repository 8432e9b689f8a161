"""The page in a real browser (Debian's chromium, driven by playwright; CI installs both): click a head, hover
a map cell and a token, move the replay slider, and what the page shows is what Python computed; the page
asks the network for nothing."""
import json
import os
import shutil

import numpy as np
import pytest

from attnlab.kv.policies import make_policy
from attnlab.view.replay import replay
from view.conftest import BUDGET, CHUNK, TOKENS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# skipped where no browser is installed, never in CI (.ci/run installs chromium and playwright)
pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                reason="needs Debian's chromium (apt-get install chromium) and playwright")


@pytest.fixture(scope="module")
def page(view):
    sync_api = pytest.importorskip("playwright.sync_api") if not os.environ.get("CI") else None
    if sync_api is None:
        from playwright import sync_api
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        pg = browser.new_page(viewport={"width": 1300, "height": 1000})
        pg.requests, pg.errors = [], []
        pg.on("request", lambda r: pg.requests.append(r.url))
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        pg.goto(view.path.as_uri())
        pg.wait_for_selector("body[data-ready='1']", timeout=30000)
        yield pg
        browser.close()


WEIGHTS = "s => s.map(e => e.dataset.w === undefined ? null : +e.dataset.w)"  # each token's shown weight, or None


def weight(view, layer, head, i, j) -> float:
    """What Python says the page shows for one cell: the stored 8-bit code, dequantised."""
    return int(view.q[layer, head, i, j]) * float(view.scale[layer, head]) / 255


def test_the_page_asks_for_nothing_but_itself_and_raises_nothing(view, page):
    assert page.requests == [view.path.as_uri()] and page.errors == []


def test_clicking_a_head_opens_its_map_and_heavy_hitters(view, page):
    layer, head = 1, 3
    page.click(f"#grid canvas[data-layer='{layer}'][data-head='{head}']")
    a = view.attention[layer, head, 1:].double()
    title = page.inner_text("#map-title")
    assert title.startswith(f"layer {layer}, head {head} (KV head {head // 2})")
    assert f"first-token share {float(a[:, 0].mean()):.3f}" in title
    assert page.locator("#grid .cell.selected").count() == 1
    kv = head // 2
    acc = view.attention[layer].double().reshape(2, -1, TOKENS, TOKENS).sum((1, 2))[kv]  # (T,) H2O's score
    assert float(page.get_attribute("#heavy-info", "data-first-share")) == pytest.approx(
        float(acc[:4].sum() / acc.sum()), rel=1e-9)
    box = page.locator("#heavy").bounding_box()
    page.mouse.move(box["x"] + 10.5 * box["width"] / TOKENS, box["y"] + box["height"] / 2)
    token = json.dumps(view.tok.decode([int(view.ids[10])]), ensure_ascii=False)  # as the page quotes it
    assert page.inner_text("#heavy-hover").startswith(f"token 10 {token}: accumulated attention {float(acc[10]):.3f}")
    assert len(page.evaluate("window.attnlab.timings")) >= 2  # the switch was timed (benchmarks report it)


def test_hovering_a_map_cell_shows_its_query_key_and_weight(view, page):
    page.click("#grid canvas[data-layer='0'][data-head='2']")
    box = page.locator("#map").bounding_box()
    for i, j in [(20, 5), (30, 0), (7, 7)]:
        page.mouse.move(box["x"] + (j + 0.5) * box["width"] / TOKENS, box["y"] + (i + 0.5) * box["height"] / TOKENS)
        info = page.locator("#cell-info")
        assert (int(info.get_attribute("data-query")), int(info.get_attribute("data-key"))) == (i, j)
        assert float(info.get_attribute("data-weight")) == pytest.approx(weight(view, 0, 2, i, j), abs=1e-12)


def test_hovering_a_token_lights_up_its_attention_row_for_the_head_and_for_the_layer(view, page):
    page.click("#grid canvas[data-layer='1'][data-head='0']")
    page.check("input[name=row-mode][value=head]")
    page.hover("#tokens span[data-i='25']")
    shown = page.eval_on_selector_all("#tokens span", WEIGHTS)
    assert shown[26:] == [None] * (TOKENS - 26)
    assert np.allclose(shown[:26], [weight(view, 1, 0, 25, j) for j in range(26)], atol=1e-12)
    page.check("input[name=row-mode][value=layer]")
    page.hover("#tokens span[data-i='3']")
    page.hover("#tokens span[data-i='25']")
    shown = page.eval_on_selector_all("#tokens span", WEIGHTS)
    mean = [np.mean([weight(view, 1, h, 25, j) for h in range(4)]) for j in range(26)]
    assert np.allclose(shown[:26], mean, atol=1e-12)
    page.check("input[name=row-mode][value=head]")


@pytest.mark.parametrize("policy", ["h2o", "sinks"])
def test_moving_the_replay_slider_shows_the_policys_kept_set_at_each_step(view, page, policy):
    layer, head = 1, 3
    page.click(f"#grid canvas[data-layer='{layer}'][data-head='{head}']")
    labels = page.eval_on_selector_all("#policy option", "os => os.map(o => o.textContent)")
    page.select_option("#policy", index=[i for i, x in enumerate(labels) if x.startswith(policy + " ")][0])
    (alone,) = replay(view.model, view.ids, [make_policy(policy, BUDGET, n_sink=4)], CHUNK)
    page.focus("#step")
    page.keyboard.press("Home")
    for step in range(len(alone.ends)):
        if step:
            page.keyboard.press("ArrowRight")
        expected = alone.kept[step, layer, head // 2].nonzero().flatten().tolist()
        kept = page.eval_on_selector_all("#tokens span.kept", "s => s.map(e => +e.dataset.i)")
        future = page.eval_on_selector_all("#tokens span.future", "s => s.map(e => +e.dataset.i)")
        assert kept == expected, step
        assert future == list(range(alone.ends[step], TOKENS))
        assert page.get_attribute("#step-info", "data-kept") == ",".join(map(str, expected))


def test_a_screenshot_of_the_page(view, page, tmp_path):
    shot = tmp_path / "view.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
