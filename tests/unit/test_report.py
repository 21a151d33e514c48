"""`harness report`: the page's content from real results (tests/golden/compare), and the
page itself in a real browser (Debian's chromium + chromium-driver, driven by selenium)."""

from __future__ import annotations

import itertools
import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

from harness import cli
from harness.output import compare, report, results

GOLDEN = Path(__file__).parent.parent / "golden" / "compare"
VERIFY = GOLDEN / "verify-2026-11-24.json"
ARTEFACTS = Path(__file__).parent.parent.parent / "results" / "test-artefacts"


def medians(metrics: Any, path: str = "") -> dict[tuple[str, float], float]:
    """(series, x) -> median of every measurement named <group>/<series>@<x>, read from
    the test's metrics as it wrote them."""
    if isinstance(metrics, dict) and "median" in metrics:
        head, _, x = path.rpartition("@")
        return {(head.partition("/")[2] or head, float(x)): float(metrics["median"])}
    if not isinstance(metrics, dict):
        return {}
    return {k: v for key, value in metrics.items()
            for k, v in medians(value, f"{path}/{key}" if path else key).items()}


def test_every_benchmark_point_is_a_median_of_its_metrics() -> None:
    doc = json.loads(VERIFY.read_text())
    run = results.from_json(doc)
    for cell in ("6.12", "6.1"):
        bench = next(t for c in doc["cells"] if c["cell"] == cell for t in c["tests"]
                     if t["name"] == "memcg_kfuncs_bench")
        plots = report.plots(next(t for c in run.cells if c.cell == cell for t in c.tests
                                  if t.name == "memcg_kfuncs_bench"))
        assert [p.title for p in plots] == ["memcg_kfuncs_bench: methods"]
        points = {(pt.series, pt.x): pt.y for line in plots[0].lines for pt in line.points}
        assert points == medians(bench["extra"]["metrics"])
        assert {x for _, x in points} == {1.0, 100.0}
        # higher on the page is a larger value (SVG y grows downwards)
        pts = sorted((pt for line in plots[0].lines for pt in line.points), key=lambda p: p.y)
        assert all(a.py >= b.py for a, b in itertools.pairwise(pts))


def test_the_grid_has_one_cell_per_result_and_declared_failures_say_so() -> None:
    doc = json.loads(VERIFY.read_text())
    v = report.view(results.from_json(doc), {})
    shown = [(r["cell"], row["test"]) for row in v["grid"] for r in row["results"] if r]
    assert sorted(shown) == sorted((c["cell"], t["name"]) for c in doc["cells"]
                                   for t in c["tests"])
    html = report.render(results.from_json(doc), {})
    assert html.count('<td class="result ') == len(shown)
    assert "FAIL (as declared)" in html and "kselftest-cgroup-test_freezer" in html


def _png_pixels(png: bytes) -> bytes:
    """The raw scanlines of a PNG (no decoding of filters needed to tell blank from not)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(data)


def test_the_report_in_a_real_browser(tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(VERIFY, run / "results.json")
    assert cli.main(["report", str(run)]) == 0
    page = run / "report" / "index.html"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=Service(shutil.which("chromedriver") or "chromedriver"))
    try:
        driver.get(page.as_uri())
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        doc = json.loads(VERIFY.read_text())
        results = [(c["cell"], t["name"], t["status"]) for c in doc["cells"] for t in c["tests"]]
        cells = driver.find_elements(By.CSS_SELECTOR, "#grid td.result")
        assert sorted((e.get_attribute("data-cell"), e.get_attribute("data-test"),
                       e.get_attribute("data-status")) for e in cells) == sorted(results)
        # each grid cell links to its details
        first = cells[0].find_element(By.TAG_NAME, "a").get_attribute("href") or ""
        assert driver.find_elements(By.ID, first.split("#")[1])
        # every benchmark's medians: memcg_kfuncs_bench by method and cgroup count (6.12,
        # 6.1), rstat_tree_bench by mode/method and tree size (6.12-hierarchical)
        want = sorted((s, x, y) for c in doc["cells"] for t in c["tests"]
                      for (s, x), y in medians((t.get("extra") or {}).get("metrics")).items())
        assert {s for s, _, _ in want} >= {"iter_self", "syscall_run", "few/rstat_root"}
        points = driver.find_elements(By.CSS_SELECTOR, "svg.plot circle.point")
        got = sorted((p.get_attribute("data-series"), float(p.get_attribute("data-x") or 0),
                      float(p.get_attribute("data-y") or 0)) for p in points)
        assert got == want
        assert all(p.is_displayed() for p in points)
        shot = driver.get_screenshot_as_png()
    finally:
        driver.quit()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    (ARTEFACTS / "report.png").write_bytes(shot)
    pixels = _png_pixels(shot)
    assert len(set(pixels)) > 50, "the screenshot is blank"


def test_a_comparison_renders_every_difference(tmp_path: Path) -> None:
    html = tmp_path / "c.html"
    broken = GOLDEN / "adhoc-memcg-kfuncs-broken.json"
    assert cli.main(["compare", f"{VERIFY}:6.12", f"{broken}:adhoc", "--html", str(html)]) == 1
    page = html.read_text()
    result = compare.compare(results.load_run(str(VERIFY))[0],
                             results.load_run(str(broken))[0], cells=("6.12", "adhoc"))
    assert page.count('<tr class="difference"') == len(result.differences)
    assert page.count('data-change="regressed"') == result.count(compare.Change.REGRESSED) == 5
    assert "memcg_kfuncs: parent_includes_child" in page and "REGRESSED" in page


def test_splats_are_shown_decoded_with_where_they_happened() -> None:
    doc = json.loads((GOLDEN / "faults.json").read_text())
    html = report.render(results.from_json(doc), {})
    warn = next(t for t in doc["cells"][0]["tests"] if t["name"] == "lkdtm_warn")
    s = warn["splats"][0]
    assert "where" not in s or s["where"]  # empty fields are left out of results.json
    assert "<b>WARNING</b> in lkdtm_WARNING()" in html
    first_line = (s.get("decoded") or s["text"]).splitlines()[0]
    assert first_line.replace("<", "&lt;").replace(">", "&gt;") in html
    assert html.count('<td class="result ') == sum(len(c["tests"]) for c in doc["cells"])
