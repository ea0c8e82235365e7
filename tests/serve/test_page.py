"""The web page at / in headless Chromium (Debian's `chromium`, driven by Playwright for Python; `.ci/run`
installs it): submit from the form, watch the progress bar advance, play the video, cancel a queued job.

Screenshots go to tests/serve/artifacts/ (phone-sized viewport).
"""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import ARTIFACTS

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        tab = browser.new_page(viewport=PHONE)
        tab.set_default_timeout(120_000)
        tab.goto(server.url + "/")
        tab.wait_for_selector("body[data-ready=true]")
        yield tab
        browser.close()


def job_item(page, prompt: str, status: str):
    return page.locator(f"li.job[data-status={status}]", has_text=prompt)


def generate(page, prompt: str, **fields) -> None:
    page.fill("textarea[name=prompt]", prompt)
    for name in ("steps", "seed"):
        page.fill(f"input[name={name}]", str(fields.get(name, "")))
    page.click("#submit")


def test_form_progress_and_video(page, server):
    defaults = httpx.get(server.url + "/v1/models").json()["data"][0]["defaults"]
    generate(page, "a kite from the page", seed=5)
    item = job_item(page, "a kite from the page", "succeeded")
    item.wait_for()
    shown = page.evaluate("window.vidaxProgress")
    steps = [p["step"] for p in shown if p["stage"] == "denoise"]
    assert steps == sorted(steps) and steps[-1] == defaults["steps"] and len(set(steps)) >= 2, shown
    video = item.locator("video")
    video.evaluate("v => v.readyState >= 1 ? 0 : new Promise(ok => v.addEventListener('loadedmetadata', ok))")
    duration = video.evaluate("v => v.duration")
    assert abs(duration - defaults["frames"] / defaults["fps"]) <= 1 / defaults["fps"], duration
    assert video.evaluate("v => v.videoWidth") == defaults["width"]
    assert "--seed 5" in item.locator("code").inner_text()
    page.screenshot(path=str(ARTIFACTS / "page-gallery.png"), full_page=True)


def test_cancel_a_queued_job(page):
    # long enough to be running still when the test cancels it (wan-tiny takes ~50 ms a step once its programs
    # are in the compile cache: 40 steps ended before the second cancel)
    generate(page, "a long one", steps=2000)
    job_item(page, "a long one", "running").wait_for()
    generate(page, "a queued one")
    queued = job_item(page, "a queued one", "queued")
    queued.wait_for()
    page.screenshot(path=str(ARTIFACTS / "page-queue.png"), full_page=True)
    queued.locator("button.cancel").click()
    job_item(page, "a queued one", "cancelled").wait_for()
    job_item(page, "a long one", "running").locator("button.cancel").click()
    job_item(page, "a long one", "cancelled").wait_for()
    assert page.locator("#queue li").count() == 0
    page.screenshot(path=str(ARTIFACTS / "page-cancelled.png"), full_page=True)


def test_api_docs_render_from_the_server_alone(page, server):
    """/docs draws every operation with Swagger UI's files from the server itself: no request leaves it
    (FastAPI's default page loads them from a CDN and stays blank offline)."""
    context = page.context.browser.new_context()
    tab = context.new_page()
    requested: list[str] = []
    tab.on("request", lambda request: requested.append(request.url))
    tab.goto(server.url + "/docs")
    tab.locator(".opblock-summary-path[data-path='/v1/videos']").first.wait_for()
    assert tab.locator(".opblock").count() >= 4
    assert requested and all(url.startswith(server.url) for url in requested), requested
    context.close()


def test_upload_inputs_follow_the_models_file_fields(page, server, tmp_path):
    """One file input per upload field of GET /v1/models (several files where the field takes them), and the files
    chosen go with the request: two reference images sent to wan-tiny get the server's refusal of them (a form
    without its files would have been sent as JSON and queued)."""
    from tests.serve.test_api import png_bytes

    uploads = httpx.get(server.url + "/v1/models").json()["data"][0]["uploads"]
    inputs = page.locator("#uploads input[type=file]")
    assert sorted(inputs.evaluate_all("xs => xs.map(x => x.name)")) == sorted(uploads)
    for role, upload in uploads.items():
        several = page.locator(f"#uploads input[name={role}]").evaluate("x => x.multiple")
        assert several == (upload["kind"] != "image"), role
    files = []
    for name in ("first.png", "second.png"):
        (tmp_path / name).write_bytes(png_bytes())
        files.append(str(tmp_path / name))
    page.set_input_files("#uploads input[name=reference_images]", files)
    page.fill("textarea[name=prompt]", "with references")
    page.click("#submit")
    error = page.locator("#form-error")
    error.filter(has_text="--reference-image").wait_for()
    assert "wan-tiny takes no --reference-image (the VACE models do" in error.inner_text()
    page.set_input_files("#uploads input[name=reference_images]", [])
    page.fill("textarea[name=prompt]", "")
