"""Renting and releasing Hyperbolic marketplace machines (module_utils/hyperbolic/rent.py), against the fake API
on loopback with its create/terminate, capacity, prices and injected failures; the instances' SSH is a real TCP
listener that answers with an SSH banner, on an address of this machine other than loopback (a rental's SSH host is
never loopback: testing.own_address). Then the module itself through ansible-playbook: check mode, bad input,
and that the API key never shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import (
    Rent,
    RentError,
    check_label,
    choose,
    names,
)
from ansible_collections.rlinfra.verl.plugins.modules import hyperbolic_instance
from tests.fake_hyperbolic.server import FakeHyperbolic, machine_item, marketplace_instance
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, own_address

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


MACHINES = [
    machine_item("gpu-a", cluster="c1", cents=249),
    machine_item("gpu-b", cluster="c1", gpus_total=16, cents=199),
    machine_item("gpu-c", cluster="c2", model="NVIDIA-A100-SXM4-80GB", cents=129),
    machine_item("gpu-d", cluster="c3", cents=189, region="eu-north-1"),
    machine_item("gpu-e", cluster="c3", cents=99, reserved=True),
]


@pytest.fixture
def fake(sshd):
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as api:
        host = own_address()  # this machine, by an address that is not its loopback (which a rental's may never be)
        api.set_machines(MACHINES, host_pool=[(host, sshd, "root")] * 6)
        # Someone else's instance on the same account, and an untagged one: never counted, never released.
        other = marketplace_instance("not-mine", host, port=sshd, status="online")
        other["userMetadata"] = {"rlinfra": {"label": "other", "name": "other-0"}}
        api.set_instances(marketplace=[other, marketplace_instance("untagged", host, port=sshd, status="online")])
        yield api


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def renter(fake, clock=None):
    clock = clock or Clock()
    client = HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url, retries=1, retry_backoff=0, sleep=lambda s: None)
    return Rent(client, sleep=clock.sleep, clock=clock)


def creates(fake):
    return [r for r in fake.requests if r[1] == "/v1/marketplace/instances/create"]


def test_choose_cheapest_first_two_on_a_roomy_machine_and_says_why_not():
    picks, why = choose(MACHINES, 3, gpu_model="H100", gpu_count=8)
    assert why == "" and [m["node"] for m in picks] == ["gpu-d", "gpu-b", "gpu-b"]
    picks, why = choose(MACHINES, 2, gpu_model="h100", gpu_count=8, region="us-central-1", max_price=2.0)
    assert [m["node"] for m in picks] == ["gpu-b", "gpu-b"] and why == ""
    picks, why = choose(MACHINES, 3, gpu_model="H100", gpu_count=8, max_price=1.95)
    assert why == (
        "no machine matches: 3 instance(s) of 8 x H100 GPU needed, the marketplace has 4 machine(s) ready and "
        "not reserved, 3 with H100 GPUs, 3 with 8 GPUs free, 1 at or under $1.95 per GPU-hour, room for 1; "
        "nothing was rented - try another gpu_model, region or max_price, fewer nodes, or later"
    )
    assert choose(MACHINES, 1, gpu_model="B200")[1].startswith("no machine matches")
    assert check_label("exp-a") == "" and "lower-case" in check_label("Exp_A") and check_label("-x")


def test_rent_three_wait_then_a_second_run_rents_nothing(fake):
    rent = renter(fake)
    result = rent.present("exp-a", 3, gpu_model="H100", gpu_count=8)
    assert result["changed"] and len(result["rented"]) == 3
    assert [i["name"] for i in result["instances"]] == ["exp-a-0", "exp-a-1", "exp-a-2"]
    assert all(
        i["status"] == "online" and i["host"] == own_address() and i["user"] == "root" for i in result["instances"]
    )
    bodies = [json.loads(json.dumps(r["item"]["userMetadata"])) for r in fake.rented]
    assert bodies == [{"rlinfra": {"label": "exp-a", "name": "exp-a-%d" % n}} for n in range(3)]
    assert [r["node"]["id"] for r in fake.rented] == ["gpu-d", "gpu-b", "gpu-b"]  # cheapest first

    before = len(creates(fake))
    again = rent.present("exp-a", 3, gpu_model="H100", gpu_count=8)
    assert not again["changed"] and again["rented"] == [] and len(creates(fake)) == before
    # One more node: only the missing one, with the next free name.
    more = rent.present("exp-a", 4, gpu_model="H100", gpu_count=8)
    assert len(more["rented"]) == 1 and more["instances"][-1]["name"] == "exp-a-3"

    gone = rent.absent("exp-a")
    assert sorted(gone["released"]) == sorted(i["id"] for i in more["instances"])
    assert fake.rented == [] and [i["id"] for i in fake.marketplace] == ["not-mine", "untagged"]
    assert rent.absent("exp-a")["changed"] is False


def test_check_mode_says_what_it_would_rent_and_rents_nothing(fake):
    result = renter(fake).present("exp-b", 2, gpu_model="H100", check_mode=True)
    assert result["changed"] and [p["name"] for p in result["would_rent"]] == ["exp-b-0", "exp-b-1"]
    assert result["would_rent"][0]["price_per_gpu_hour"] == 1.89
    assert creates(fake) == [] and fake.rented == []


def test_no_machine_matches_is_one_line_and_rents_nothing(fake):
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-c", 2, gpu_model="H200")
    assert "no machine matches" in str(err.value) and "\n" not in str(err.value)
    assert creates(fake) == []


def test_a_failed_rental_part_way_releases_what_this_call_rented(fake):
    fake.fail_create(2, status=400, detail="Not enough GPUs available")
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-d", 3, gpu_model="H100")
    first = fake.terminated[0]
    assert str(err.value) == (
        "renting exp-d-1 (c1/gpu-b) failed: Hyperbolic API answered HTTP 400 on POST "
        "/v1/marketplace/instances/create: Not enough GPUs available; released what this call "
        "rented: %s" % first
    )
    assert fake.rented == [] and fake.terminated == [first]


def test_keep_partial_keeps_and_says_so(fake):
    fake.fail_create(2, status=503, detail="no capacity")
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-e", 2, gpu_model="H100", keep_partial=True)
    assert "kept what this call rented (keep_partial)" in str(err.value) and fake.terminated == []
    assert len(fake.rented) == 1


def test_an_instance_that_fails_or_never_comes_up_is_released(fake):
    fake.fail_status_after[1] = "failed"
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-f", 2, gpu_model="H100")
    assert "instance(s) exp-f-0 ended failed" in str(err.value) and "released what this call rented" in str(err.value)
    assert fake.rented == []

    fake.fail_status_after.clear()
    fake.ready_after = 10**6
    clock = Clock()
    with pytest.raises(RentError) as err:
        renter(fake, clock).present("exp-g", 1, gpu_model="H100", timeout=60)
    assert "not ready after 60s: exp-g-0 is creating" in str(err.value) and fake.rented == []
    assert 60 <= clock.now < 80


def test_names_fill_gaps():
    existing = [{"userMetadata": {"rlinfra": {"label": "x", "name": "x-1"}}}]
    assert names(existing, "x", 2) == ["x-0", "x-2"]


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - rlinfra.verl.hyperbolic_instance:
        api: marketplace
        label: "{{ label }}"
        count: 2
        gpu_model: H100
      register: out
      ignore_errors: true
    - ansible.builtin.copy:
        dest: "{{ dest }}"
        content: "{{ out | to_json }}"
        mode: "0600"
      check_mode: false
"""


LABEL_LINE = (
    "label must be 1-40 lower-case letters, digits and '-' (not at either end), got %r: it names the instances "
    "(<label>-0, <label>-1, ...), their Ray cluster and its hosts"
)


def _module(tmp_path, fake, label, *extra, key=HYPERBOLIC_TEST_KEY):
    (tmp_path / "p.yml").write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HYPERBOLIC_"))}
    env.update(HYPERBOLIC_API_KEY=key, HYPERBOLIC_API_URL=fake.url, ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [
            PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + sys.executable,
            "-e",
            "label=" + label,
            "-e",
            "dest=" + str(tmp_path / "out.json"),
            str(tmp_path / "p.yml"),
        ]
        + list(extra),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "out.json").read_text()), proc.stdout + proc.stderr


def test_the_module_check_mode_bad_input_and_the_key(tmp_path, fake):
    out, text = _module(tmp_path, fake, "exp-h", "--check")
    assert out["changed"] and [p["name"] for p in out["would_rent"]] == ["exp-h-0", "exp-h-1"] and creates(fake) == []
    out, text = _module(tmp_path, fake, "Exp_H")
    assert out["failed"] and out["msg"] == LABEL_LINE % "Exp_H"
    out, text = _module(tmp_path, fake, "exp-h", key="sk-hyperbolic-WRONG-0000000000000000")
    assert out["failed"] and "rejected the API key" in out["msg"] and "WRONG" not in text
    out, text = _module(tmp_path, fake, "exp-h")
    assert out["changed"] and len(out["instances"]) == 2 and HYPERBOLIC_TEST_KEY not in text


# What the module refuses before it asks the API anything: the vocabulary's types (module ARGS), then the rule that
# needs two options (an empty gpu_model with state=present rented any GPU at any price) ---------------------------

NOTHING = "; nothing was rented or released"
REFUSED = [
    (
        "empty_gpu_model",
        {"gpu_model": ""},
        "hyperbolic_instance: gpu_model must name the GPU model to rent (for example H100), or be any to rent any model, "
        "which then needs max_price (US dollars per GPU-hour)" + NOTHING,
    ),
    (
        "blank_gpu_model",
        {"gpu_model": "  ", "max_price": 2.0},
        "hyperbolic_instance: gpu_model must name the GPU model to rent (for example H100), or be any to rent any model, "
        "which then needs max_price (US dollars per GPU-hour)" + NOTHING,
    ),
    (
        "any_without_price",
        {"gpu_model": "any"},
        "hyperbolic_instance: gpu_model any rents any GPU model at any price: set max_price (US dollars per GPU-hour), or "
        "name the model (for example H100)" + NOTHING,
    ),
    (
        "price_zero",
        {"max_price": 0},
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got 0.0",
    ),
    (
        "price_negative",
        {"max_price": -2.5},
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got -2.5",
    ),
    (
        "price_huge",
        {"max_price": 25000},
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got 25000.0",
    ),
    ("count_huge", {"count": 10**9}, "count must be a whole number from 1 to 256, got 1000000000"),
    ("price_nan", {"max_price": "nan"}, "max_price must be a finite number, got nan"),
    ("price_inf", {"max_price": "inf"}, "max_price must be a finite number, got inf"),
    ("label", {"label": "Exp_H"}, LABEL_LINE % "Exp_H"),
    ("count", {"count": 0}, "count must be a whole number from 1 to 256, got 0"),
    ("gpu_count", {"gpu_count": 0}, "gpu_count must be a whole number from 1 to 64, got 0"),
    ("wait_timeout", {"wait_timeout": -1}, "wait_timeout must be a whole number of seconds from 1 to 86400, got -1"),
    (
        "gpu_model_option",
        {"gpu_model": "--all"},
        "gpu_model must be a GPU model such as H100 (letters, digits, space, _ . -), or any, got '--all'",
    ),
    (
        "api_url_file",
        {"api_url": "file:///etc/passwd"},
        "api_url must be an https:// or http:// URL, got a value that is not a URL (not shown)",
    ),
    (
        "api_url_credentials",
        {"api_url": "https://user:sk-s3cr3t@api.hyperbolic.xyz"},
        "api_url must be an https:// or http:// URL without credentials before '@' (give a token through its own secret "
        "option), got https://********@api.hyperbolic.xyz",
    ),
    (
        "api_key_newline",
        {"api_key": HYPERBOLIC_TEST_KEY + "\nX-Evil: 1"},
        "api_key must be the secret alone, without spaces, line breaks or other characters a token cannot have (the value "
        "is not shown)",
    ),
]


@pytest.mark.parametrize("label,args,expected", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_module_refuses_before_asking_the_api(label, args, expected, fake, monkeypatch, module_runner):
    monkeypatch.setenv("HYPERBOLIC_API_KEY", HYPERBOLIC_TEST_KEY)
    monkeypatch.setenv("HYPERBOLIC_API_URL", fake.url)
    out = module_runner(hyperbolic_instance.main, dict(dict(label="exp-r", count=2, gpu_model="H100"), **args))
    assert out["failed"] and out["msg"] == expected and not out.get("changed")
    assert fake.requests == [] and HYPERBOLIC_TEST_KEY not in json.dumps(out) and "s3cr3t" not in json.dumps(out)


def test_the_module_any_model_under_a_price_and_absent_without_a_model(fake, monkeypatch, module_runner):
    monkeypatch.setenv("HYPERBOLIC_API_KEY", HYPERBOLIC_TEST_KEY)
    monkeypatch.setenv("HYPERBOLIC_API_URL", fake.url)
    out = module_runner(
        hyperbolic_instance.main,
        dict(api="marketplace", label="exp-s", count=1, gpu_model="any", max_price=1.5),
        check_mode=True,
    )
    assert out["changed"] and [(p["name"], p["node_name"]) for p in out["would_rent"]] == [
        ("exp-s-0", "gpu-c")
    ]  # any model, under the price: the A100 machine, the only one at or under $1.50
    out = module_runner(hyperbolic_instance.main, dict(api="marketplace", label="exp-s", state="absent"))
    assert out.get("failed") is not True and out["changed"] is False, out
    assert creates(fake) == []
