"""The Ray dashboard as a user reaches it: site.yml's printed words followed in a real browser.

site.yml prints, for the head, an SSH tunnel command, the page to open, and a command that prints the token
the dashboard asks for. This test runs exactly those printed commands (the local port is changed only if
8265 is taken on this machine), opens the page in headless Chromium (Debian's package, driven through
chromedriver), types the token into the dashboard's "Authentication Token Required" dialog the way a user
does, and waits until the Jobs page lists the job submit.yml ran. A screenshot is kept in
artifacts/test-dashboard/. Without the token the dashboard's API refuses (401), with a wrong one too (403),
and the jobs are not shown.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY

TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-dash-" + TAG
SHOTS = ROOT / "artifacts" / "test-dashboard"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def playbook(name, *extra):
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        args += ["-e", item]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_NOCOLOR"] = "1"
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def printed_lines(output):
    """The msg list of site.yml's "Show how to reach the dashboard" task, as the user reads it."""
    block = output.split("TASK [Show how to reach the dashboard]", 1)[1].split("PLAY RECAP", 1)[0]
    body = block.split("=> ", 1)[1]
    return yaml.safe_load(body)["msg"]


def free_port(preferred):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def http(url, cookie=None):
    req = urllib.request.Request(url, headers={"Cookie": "ray-authentication-token=%s" % cookie} if cookie else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("Chromium is not installed: scripts/bootstrap.sh installs Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_printed_tunnel_and_token_open_the_dashboard_in_a_browser(sandbox, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    site = playbook("site.yml")
    assert site.returncode == 0, site.output[-3000:]
    lines = printed_lines(site.output)
    tunnel_line = next(ln for ln in lines if ln.startswith("Dashboard: "))
    token_line = next(ln for ln in lines if ln.startswith("Dashboard token "))
    m = re.match(r"Dashboard: (?P<cmd>.+?)\s+then open (?P<url>http://127\.0\.0\.1:(?P<port>\d+))$", tunnel_line)
    assert m, tunnel_line
    tunnel = shlex.split(m.group("cmd"))
    token_cmd = shlex.split(token_line.split("): ", 1)[1])

    run = "dash-" + TAG
    submit = playbook("submit.yml", "exp=smoke", "run=" + run, json.dumps({"verl_job_checkpoint_root": CKPT_ROOT}))
    assert submit.returncode == 0, submit.output[-3000:]
    sid = "rlinfra-smoke-default-" + run

    env = dict(os.environ)
    token = subprocess.run(token_cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert token.returncode == 0 and len(token.stdout.strip()) >= 32, token.stderr
    token = token.stdout.strip()
    assert token not in site.output and token not in submit.output

    # The printed tunnel; only the local port changes, and only when 8265 is taken here.
    port = free_port(int(m.group("port")))
    if port != int(m.group("port")):
        tunnel = [re.sub(r"^%s:" % m.group("port"), "%d:" % port, a) for a in tunnel]
    url = "http://127.0.0.1:%d" % port
    proc = subprocess.Popen(tunnel, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http(url + "/api/authentication_mode")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, "the printed tunnel command exited: %s" % proc.stderr.read()
            time.sleep(0.5)
        else:
            pytest.fail("the tunnel gave no dashboard at %s within 30 s" % url)

        # Token authentication is on: the API refuses without the token, and with a wrong one.
        assert json.loads(http(url + "/api/authentication_mode")[1]) == {"authentication_mode": "token"}
        assert http(url + "/api/jobs/")[0] == 401
        assert http(url + "/api/jobs/", cookie="not-the-token")[0] == 403
        status, body = http(url + "/api/jobs/", cookie=token)
        assert status == 200 and sid in body

        browser.get(url + "/#/jobs")
        field = WebDriverWait(browser, 60).until(
            EC.visibility_of_element_located((By.CSS_SELECTOR, "input[placeholder='Enter your authentication token']"))
        )
        assert "Authentication Token Required" in browser.page_source
        assert sid not in browser.page_source  # nothing listed before the token
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "token-dialog.png"))
        field.send_keys(token + Keys.ENTER)
        WebDriverWait(browser, 90).until(lambda d: sid in d.page_source)
        cookies = {c["name"]: c for c in browser.get_cookies()}
        assert cookies["ray-authentication-token"]["httpOnly"] is True
        time.sleep(1)  # let the table finish drawing for the screenshot
        shot = SHOTS / "jobs.png"
        browser.save_screenshot(str(shot))
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
        assert "SUCCEEDED" in browser.page_source
        print("screenshots: %s, %s" % (SHOTS / "token-dialog.png", shot))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
