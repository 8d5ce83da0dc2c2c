"""Renting on Hyperbolic's current on-demand API (module_utils/hyperbolic/rent.py, api="on_demand") against the fake API on
loopback, which serves the shapes the public clients use (docs/INVENTORY.md, "Which shape came from where"):

* options: ``GET /v2/on-demand/rental-options``, a bare array as getcomputable/gpu-index captured it live;
* rent, list: ``POST``/``GET /v2/on-demand/virtual-machine-rentals`` (claude-hyperbolic-guardrails server/index.ts,
  lisa-rtm fast/hyperbolic.py): a Pending rental with a numeric id, then Running with ``providerData.sshNetworking``;
* terminate: ``POST .../terminate`` with ``{"rentalId": <number>}`` -> ``{"message": "Rental successfully terminated"}``;
* balance: ``GET /v2/customer/balance`` -> ``{"balanceCents", "maxOverdraftCents"}`` (lisa-rtm, guardrails);
* errors with a code (hyperbolic-go's APIError: INSUFFICIENT_BALANCE, REGION_DISABLED, RENTAL_NOT_FOUND,
  ALREADY_TERMINATED), and faults: an answer lost after the rental was made, a long Pending.

The instances' SSH is a real listener answering with an SSH banner, on an address of this machine other than loopback
(a rental's SSH host is never loopback: testing.own_address).
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import (
    Rent,
    RentError,
    choose_options,
    money,
    ours,
)
from tests.fake_hyperbolic.server import FakeHyperbolic, current_rental, marketplace_v2_rental, rental_option
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, own_address

OPTIONS = [
    rental_option("h100", 8, "us-east-1", cents=2552),
    rental_option("h100", 8, "eu-north-5", cents=2392, available=1),
    rental_option("h200", 8, "eu-north-5", cents=3192),
    rental_option("h100", 1, "ca-east-1", cents=275),
    rental_option("h100", 8, "uk-southeast-3", cents=1552, machine_type="bare-metal"),
    rental_option("h100", 8, "us-central-1", cents=999),  # cheapest, but its region is disabled
    rental_option("b200", 8, "jp-east-1", cents=4000, enabled=False),
]


@pytest.fixture
def fake(sshd):
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as api:
        host = own_address()  # this machine, by an address that is not its loopback (which a rental's may never be)
        api.set_options([dict(o) for o in OPTIONS], host_pool=[(host, sshd, "ubuntu")] * 8)
        # Someone else's rentals on the same account: never counted, never released.
        api.set_instances(
            on_demand=[
                current_rental(9001, "other-0", host=host, port=sshd),
                current_rental(9002, "exp-a-notes", host=host, port=sshd),
            ]
        )
        yield api


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def renter(fake, clock=None, record_ids=(), timeout=10.0):
    clock = clock or Clock()
    client = HyperbolicClient(
        HYPERBOLIC_TEST_KEY, fake.url, retries=1, retry_backoff=0, sleep=lambda s: None, timeout=timeout
    )
    return Rent(client, sleep=clock.sleep, clock=clock, api="on_demand", record_ids=record_ids)


def creates(fake):
    return [r for r in fake.requests if r[0] == "POST" and r[1] == "/v2/on-demand/virtual-machine-rentals"]


def test_options_cheapest_per_gpu_hour_first_within_what_is_available():
    picks, why = choose_options(OPTIONS, 3, gpu_model="H100", gpu_count=8)
    # us-central-1 is the cheapest row (an absent totalAvailable is unknown, not zero: it takes all three).
    assert why == "" and [p["region"] for p in picks] == ["us-central-1"] * 3
    rows = [o for o in OPTIONS if o["region"] != "us-central-1"]
    picks, why = choose_options(rows, 3, gpu_model="H100", gpu_count=8)
    # eu-north-5 has one left (totalAvailable 1); then us-east-1.
    assert why == "" and [p["region"] for p in picks] == ["eu-north-5", "us-east-1", "us-east-1"]
    picks, why = choose_options(OPTIONS, 2, gpu_model="h100", gpu_count=8, region="us-east-1", max_price=3.2)
    assert [p["region"] for p in picks] == ["us-east-1", "us-east-1"] and why == ""
    picks, why = choose_options(rows, 2, gpu_model="H100", gpu_count=8, max_price=3.0)
    assert why == (
        "no machine matches: 2 instance(s) of 8 x H100 GPU needed, the on-demand API offers 4 enabled "
        "virtual-machine option(s), 3 with H100 GPUs, 2 with 8 GPUs, 1 at or under $3.00 per GPU-hour, room "
        "for 1; nothing was rented - try another gpu_model, region or max_price, fewer nodes, or later"
    )
    assert (
        choose_options(OPTIONS, 1, gpu_model="H100", gpu_count=8, machine_type="bare-metal")[0][0]["region"]
        == "uk-southeast-3"
    )
    assert choose_options(OPTIONS, 1, gpu_model="B200", gpu_count=8)[1].startswith("no machine matches")


def test_rent_wait_for_running_then_a_second_run_rents_nothing_and_absent_releases_exactly_ours(fake):
    rent = renter(fake)
    result = rent.present("exp-a", 2, gpu_model="H100", gpu_count=8, region="us-east-1")
    assert result["changed"] and result["api"] == "on_demand" and len(result["rented"]) == 2
    assert [i["name"] for i in result["instances"]] == ["exp-a-0", "exp-a-1"]
    assert all(
        i["status"] == "running"
        and i["host"] == own_address()
        and i["user"] == "ubuntu"
        and i["cost_per_hour"] == 25.52
        for i in result["instances"]
    )
    assert result["cost_per_hour"] == 51.04
    assert fake.od_bodies == [
        {"gpuType": "h100", "gpuCount": 8, "region": "us-east-1", "label": "exp-a-%d" % n} for n in (0, 1)
    ]
    labels = sorted(r["label"] for r in fake.active_rentals())
    assert labels == ["exp-a-0", "exp-a-1"]

    before = len(creates(fake))
    again = rent.present("exp-a", 2, gpu_model="H100", gpu_count=8, region="us-east-1")
    assert not again["changed"] and again["rented"] == [] and len(creates(fake)) == before

    gone = rent.absent("exp-a")
    assert sorted(gone["released"]) == sorted(str(r) for r in fake.od_terminated) and len(gone["released"]) == 2
    assert fake.active_rentals() == [] and [r["id"] for r in fake.on_demand] == [9001, 9002]
    assert rent.absent("exp-a")["changed"] is False


def test_bare_metal_options_are_named_but_not_rented_through_a_guessed_route(fake):
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-bm", 1, gpu_model="H100", gpu_count=8, machine_type="bare-metal")
    assert str(err.value) == (
        "the on-demand API lists 1 matching bare-metal option(s) (cheapest 8 x h100 in uk-southeast-3 at $15.52/h) but "
        "no public client documents a route to rent them: rent bare metal in Hyperbolic's console, then list it with "
        "the inventory plugin (one host per node)"
    )
    assert creates(fake) == [] and [r for r in fake.requests if r[0] == "POST"] == []


def test_a_lost_answer_is_never_retried_blind_the_rental_that_appeared_is_adopted(fake):
    fake.lose_answer(1)
    lines = []
    rent = renter(fake, timeout=5.0)
    rent.log = lines.append
    result = rent.present("exp-l", 1, gpu_model="H100", gpu_count=8, region="us-east-1")
    assert len(creates(fake)) == 1 and len(fake.active_rentals()) == 1  # one rental, not two
    rid = str(fake.active_rentals()[0]["id"])
    assert result["rented"] == [rid] and result["instances"][0]["name"] == "exp-l-0"
    assert any(line.startswith("the answer to renting exp-l-0 was lost") and line.endswith("adopted") for line in lines)


def test_an_insufficient_balance_is_one_line_and_nothing_is_rented(fake):
    fake.set_balance(465)
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-b", 3, gpu_model="H100", gpu_count=8, region="us-east-1")
    assert str(err.value) == (
        "the balance, $4.65 and no overdraft, does not cover 1 hour(s) of this request (3 x 8 x h100 "
        "in us-east-1 at $76.56/h = $76.56): add credit, rent fewer or cheaper machines, or lower "
        "hyperbolic_min_hours; nothing was rented"
    )
    assert creates(fake) == [] and fake.active_rentals() == []


def test_min_hours_and_a_daily_budget_count_the_whole_cluster():
    balance = {"balanceCents": 10000, "maxOverdraftCents": 2500}
    assert money(balance, 2552, min_hours=4) == ""  # $125 of credit and overdraft, $102.08 needed
    assert "does not cover 5 hour(s)" in money(balance, 2552, min_hours=5)
    assert money(balance, 2552, daily_budget=700) == ""
    assert money(balance, 2552, existing_cents=2552, daily_budget=1000) == (
        "the cluster would cost $1224.96 a day ($25.52/h new + $25.52/h already rented), over daily_budget $1000.00: rent "
        "fewer or cheaper machines, or raise the budget; nothing was rented"
    )


def test_a_disabled_region_fails_in_one_line_and_nothing_stays_rented(fake):
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-r", 1, gpu_model="H100", gpu_count=8, region="us-central-1")
    assert str(err.value).startswith(
        "renting exp-r-0 (8 x h100 in us-central-1) failed: Hyperbolic API answered HTTP "
        "400 on POST /v2/on-demand/virtual-machine-rentals: REGION_DISABLED: Region "
        "us-central-1 is disabled"
    )
    assert str(err.value).endswith("; nothing was rented") and fake.active_rentals() == []


def test_a_rental_that_stays_pending_is_released_after_the_wait(fake):
    fake.pending_polls = 10**6
    clock = Clock()
    with pytest.raises(RentError) as err:
        renter(fake, clock).present("exp-p", 1, gpu_model="H100", gpu_count=8, region="us-east-1", timeout=60)
    assert "not ready after 60s: exp-p-0 is pending" in str(err.value)
    assert "released what this call rented" in str(err.value) and fake.active_rentals() == []
    assert 60 <= clock.now < 80


def test_a_rental_whose_ssh_host_is_loopback_is_never_ready_and_the_line_says_why(fake, sshd):
    """127.0.0.1 from the API is the controller's own sshd: a play sent there runs on the controller. Never ready,
    however long the wait, and released after it with the reason."""
    fake.set_options([dict(o) for o in OPTIONS], host_pool=[("127.0.0.1", sshd, "ubuntu")])
    clock = Clock()
    with pytest.raises(RentError) as err:
        renter(fake, clock).present("exp-q", 1, gpu_model="H100", gpu_count=8, region="us-east-1", timeout=60)
    rid = fake.od_terminated[0]
    assert str(err.value) == (
        "not ready after 60s: exp-q-0 is running, its SSH details refused (sshNetworking host '127.0.0.1' is this "
        "machine's own loopback: SSH there reaches the controller, not the rented machine; check the rental's address "
        "in Hyperbolic's console); released what this call rented: %d" % rid
    )
    assert fake.active_rentals() == []


CONSOLE = "check the label's rentals in Hyperbolic's console (the rentals list) and run again once each has its own id"


def test_two_rentals_under_one_id_are_refused_never_counted_as_two(fake):
    """The second create's rental gets the first one's id, in the answer and in the listing: success with rented
    [id, id] before. Now one line; what it can release is released, the rental it cannot tell apart is named."""
    fake.repeat_id(2)
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-d", 2, gpu_model="H100", gpu_count=8, region="us-east-1")
    rid = fake.od_rentals[0]["record"]["id"]
    assert fake.od_rentals[1]["record"]["id"] == rid and fake.od_terminated == [rid]  # released once, not twice
    assert str(err.value) == (
        "the API named rental %d for exp-d-1, the id it had given exp-d-0: the provider's answer is contradictory (one "
        "id, two rentals); released what this call rented: %d; the API still lists exp-d-1 (%d): release it in "
        "Hyperbolic's console, it costs money - %s" % (rid, rid, rid, CONSOLE)
    )
    assert [r["label"] for r in fake.active_rentals()] == ["exp-d-1"]  # what the line names, and nothing else


def test_an_answer_naming_an_id_already_named_releases_both_rentals(fake):
    """The answer repeats the first id while the listing shows the new rental under its own: this call made both,
    both are released, and the line says the listing shows neither."""
    fake.repeat_id(2, listed=False)
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-n", 2, gpu_model="H100", gpu_count=8, region="us-east-1")
    first, second = [r["record"]["id"] for r in fake.od_rentals]
    assert str(err.value) == (
        "the API named rental %d for exp-n-1, the id it had given exp-n-0: the provider's answer is contradictory (one "
        "id, two rentals); released what this call rented: %d, %d; the listing shows none of exp-n-0, exp-n-1 now - "
        "%s" % (first, first, second, CONSOLE)
    )
    assert sorted(fake.od_terminated) == [first, second] and fake.active_rentals() == []


def test_a_listing_with_one_id_for_two_rentals_rents_nothing(fake):
    fake.set_instances(
        on_demand=[
            current_rental(555, "exp-e-0", host="203.0.113.5"),
            current_rental(555, "exp-e-1", host="203.0.113.6"),
        ]
    )
    with pytest.raises(RentError) as err:
        renter(fake).present("exp-e", 3, gpu_model="H100", gpu_count=8, region="us-east-1")
    assert str(err.value) == (
        "the API lists rental 555 2 times (as exp-e-0, exp-e-1): the provider's answer is contradictory (one id, "
        "several rentals), so which machine 555 is cannot be known; nothing was rented - %s" % CONSOLE
    )
    assert creates(fake) == [] and [r for r in fake.requests if r[0] == "POST"] == []


def test_release_under_a_twice_listed_id_releases_it_once_and_only_succeeds_when_the_listing_is_empty(fake):
    rent = renter(fake, Clock())
    rent.present("exp-f", 1, gpu_model="H100", gpu_count=8, region="us-east-1", wait=False)
    entry = fake.od_rentals[0]
    rid = entry["record"]["id"]
    fake.od_rentals.append(entry)  # one rental, listed twice: released by one request
    gone = rent.absent("exp-f", timeout=60)
    assert gone["released"] == [str(rid)] and fake.od_terminated == [rid] and fake.active_rentals() == []
    assert gone["notes"] == [
        "the API lists rental %d 2 times (as exp-f-0, exp-f-0): the provider's answer is "
        "contradictory (one id, several rentals), so which machine %d is cannot be known; each "
        "id is released once" % (rid, rid)
    ]

    rent.present("exp-g", 1, gpu_model="H100", gpu_count=8, region="us-east-1", wait=False)
    entry = fake.od_rentals[-1]
    fake.od_rentals.append(dict(entry, record=dict(entry["record"], label="exp-g-1")))  # two rentals, one id
    with pytest.raises(RentError) as err:
        rent.absent("exp-g", timeout=60)
    assert str(err.value) == (
        "released %d, but the API still lists instance(s) of exp-g after 60s: check Hyperbolic's "
        "console" % entry["record"]["id"]
    )


def test_already_terminated_and_not_found_are_released_with_a_note(fake):
    rent = renter(fake)
    rent.present("exp-t", 1, gpu_model="H100", gpu_count=8, region="us-east-1")
    rid = fake.active_rentals()[0]["id"]
    fake._od_terminate({"rentalId": rid})  # someone terminated it in the console meanwhile
    released, failures, notes = rent.release([str(rid), "424242"])
    assert released == [str(rid), "424242"] and failures == []
    assert notes == ["%s was already terminated" % rid, "424242 was not found (already gone)"]


def test_the_record_makes_a_rental_ours_where_the_api_kept_no_label(fake, sshd):
    """A rental of the earlier v2 shape (meta.ssh_command, no label of ours): ours only when the record lists it."""
    host = own_address()
    rows = [marketplace_v2_rental(7001, host, port=sshd), current_rental(9003, "x", host=host, port=sshd)]
    assert ours(rows, "exp-z") == [] and [i["id"] for i in ours(rows, "exp-z", record_ids=["7001"])] == [7001]
    tagged = marketplace_v2_rental(7002, host, user_metadata={"rlinfra": {"label": "exp-z", "name": "exp-z-0"}})
    assert [i["id"] for i in ours([tagged], "exp-z")] == [7002]
    view = renter(fake).api.view(rows[0], "exp-z")
    assert (view["host"], view["port"], view["user"], view["gpu_count"], view["cost_per_hour"]) == (
        host,
        sshd,
        "ubuntu",
        8,
        15.92,
    )


# The module: the record (rentals and their prices, 0600), the money rule in one line, and release on a retired API ---

from ansible_collections.rlinfra.verl.plugins.modules import hyperbolic_instance  # noqa: E402


@pytest.fixture
def env(fake, monkeypatch):
    monkeypatch.setenv("HYPERBOLIC_API_KEY", HYPERBOLIC_TEST_KEY)
    monkeypatch.setenv("HYPERBOLIC_API_URL", fake.url)
    return fake


def test_the_module_keeps_a_record_with_the_prices_and_releases_what_it_lists(env, tmp_path, module_runner):
    import os
    import stat

    record = tmp_path / "records" / "exp-m.json"
    args = dict(label="exp-m", count=2, gpu_model="H100", region="us-east-1", record=str(record), wait_timeout=60)
    out = module_runner(hyperbolic_instance.main, args)
    assert out["changed"] and out["api"] == "on_demand" and out["cost_per_hour"] == 51.04, out
    assert [i["cost_per_hour"] for i in out["instances"]] == [25.52, 25.52]
    data = json.loads(record.read_text())
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600 and stat.S_IMODE(os.stat(record.parent).st_mode) == 0o700
    assert sorted(r["name"] for r in data["rentals"].values()) == ["exp-m-0", "exp-m-1"]
    assert {r["api"] for r in data["rentals"].values()} == {"on_demand"}
    assert {r["cost_per_hour"] for r in data["rentals"].values()} == {25.52}

    gone = module_runner(hyperbolic_instance.main, dict(label="exp-m", state="absent", record=str(record)))
    assert gone["changed"] and len(gone["released"]) == 2 and not record.exists()
    env.set_source_status("marketplace", 404)  # the retired API, as a caller still naming it would meet it
    again = module_runner(
        hyperbolic_instance.main, dict(label="exp-m", state="absent", record=str(record), api="marketplace")
    )
    assert again["changed"] is False and again["notes"][0].startswith("the marketplace API answered 404")


def test_the_module_refuses_an_unaffordable_request_in_one_line_and_rents_nothing(env, module_runner):
    env.set_balance(1000, overdraft=500)
    out = module_runner(
        hyperbolic_instance.main, dict(label="exp-n", count=2, gpu_model="H100", region="us-east-1", min_hours=2)
    )
    assert out["failed"] and out["msg"] == (
        "hyperbolic_instance (label exp-n): the balance, $10.00 with $5.00 overdraft, does not cover 2 hour(s) of this "
        "request (2 x 8 x h100 in us-east-1 at $51.04/h = $102.08): add credit, rent fewer or cheaper machines, or lower "
        "hyperbolic_min_hours; nothing was rented"
    )
    assert creates(env) == [] and env.active_rentals() == []


def test_a_damaged_record_is_one_line_and_nothing_is_asked(env, tmp_path, module_runner):
    record = tmp_path / "exp-d.json"
    record.write_text('{"label": "exp-d", "rentals": {')
    out = module_runner(hyperbolic_instance.main, dict(label="exp-d", count=1, gpu_model="H100", record=str(record)))
    assert out["failed"] and out["msg"].startswith(
        "hyperbolic_instance (label exp-d): the record %s cannot be read" % record
    )
    assert env.requests == []


def test_the_heads_copy_of_the_record_releases_what_the_api_keeps_no_name_for(env, tmp_path, module_runner):
    """teardown.yml on a controller that did not rent (an AWX job's container): the head's copy names the rental whose
    label the API did not keep; it is released with the named one, another label's stays."""
    rent = renter(env)
    rent.present("exp-h", 2, gpu_model="H100", region="us-east-1")
    unnamed = env.od_rentals[1]["record"]
    unnamed["label"] = "soft-apricot-%d" % unnamed["id"]
    head = json.dumps(
        {
            "label": "exp-h",
            "rentals": {str(unnamed["id"]): {"api": "on_demand", "name": "exp-h-1", "cost_per_hour": 25.52}},
        }
    )
    record = tmp_path / "ctl" / "exp-h.json"
    check = module_runner(
        hyperbolic_instance.main,
        dict(label="exp-h", state="absent", record=str(record), head_record=head),
        check_mode=True,
    )
    assert check["changed"] and len(check["would_release"]) == 2 and not record.exists()
    out = module_runner(
        hyperbolic_instance.main, dict(label="exp-h", state="absent", record=str(record), head_record=head)
    )
    assert out["changed"] and sorted(out["released"]) == sorted(str(r["record"]["id"]) for r in env.od_rentals)
    assert env.active_rentals() == [] and [r["id"] for r in env.on_demand] == [9001, 9002] and not record.exists()
    assert sorted(int(i) for i in out["released"]) == sorted(env.od_terminated)
    # teardown.yml's next call (the other API, the same copy) must not bring the released rentals' record back
    other = module_runner(
        hyperbolic_instance.main,
        dict(label="exp-h", state="absent", record=str(record), head_record=head, api="marketplace"),
    )
    assert other["changed"] is False and not record.exists()

    damaged = module_runner(hyperbolic_instance.main, dict(label="exp-h", state="absent", head_record="{half"))
    # warnings are strings on older cores and {"event": {"msg": ...}} summaries on ansible-core >= 2.19
    warned = [w["event"]["msg"] if isinstance(w, dict) else w for w in damaged["warnings"]]
    assert damaged["changed"] is False and len(warned) == 1, damaged
    assert warned[0].startswith("the head's copy of the record cannot be read") and warned[0].endswith(
        "using the controller's record and the API's names only"
    ), warned


def test_replacing_an_unfit_rental_gives_it_back_and_rents_one_under_its_name(fake):
    rent = renter(fake)
    first = rent.present("exp-r", 3, gpu_model="H100", region="us-east-1")
    by_name = {i["name"]: i["id"] for i in first["instances"]}
    again = rent.present("exp-r", 3, gpu_model="H100", region="us-east-1", replace=[by_name["exp-r-1"]])
    now = {i["name"]: i["id"] for i in again["instances"]}
    assert again["replaced"] == [by_name["exp-r-1"]] and again["released"] == [by_name["exp-r-1"]]
    assert sorted(now) == ["exp-r-0", "exp-r-1", "exp-r-2"] and now["exp-r-1"] != by_name["exp-r-1"]
    assert (now["exp-r-0"], now["exp-r-2"]) == (by_name["exp-r-0"], by_name["exp-r-2"])
    assert int(by_name["exp-r-1"]) in fake.od_terminated and len(fake.active_rentals()) == 3
    creates_before = len(creates(fake))
    with pytest.raises(RentError) as err:
        rent.present("exp-r", 3, gpu_model="H100", region="us-east-1", replace=["9001"])
    assert str(err.value).startswith("replace names 9001, which is not a rental of label exp-r (its rentals: ")
    assert str(err.value).endswith("; nothing was released or rented") and len(creates(fake)) == creates_before


def test_the_module_fails_for_two_rentals_under_one_id_and_writes_no_success(env, tmp_path, module_runner):
    """hyperbolic_instance count=2 whose API gives both rentals one id: "changed, rented [id, id]" and one record entry
    before; now failed with the one line, no rentals in the result, and the record not written as if it succeeded."""
    env.repeat_id(2)
    record = tmp_path / "exp-u.json"
    out = module_runner(
        hyperbolic_instance.main,
        dict(label="exp-u", count=2, gpu_model="H100", region="us-east-1", record=str(record), wait_timeout=60),
    )
    rid = env.od_rentals[0]["record"]["id"]
    assert out["failed"] and out["msg"] == (
        "hyperbolic_instance (label exp-u): the API named rental %d for exp-u-1, the id it had given exp-u-0: the "
        "provider's answer is contradictory (one id, two rentals); released what this call rented: %d; the API still "
        "lists exp-u-1 (%d): release it in Hyperbolic's console, it costs money - %s" % (rid, rid, rid, CONSOLE)
    )
    assert "rented" not in out and "instances" not in out and not record.exists()
