"""Each department's fair-share statement, on a page and in the API: guaranteed, used, borrowed and lent, the
decayed history behind the factor and the factor's effect on the queue; a member sees their own department's,
a platform admin every department's."""

from __future__ import annotations

import pytest

from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(lab, submit, go):
    # vision runs 6 of the 8 A100s (2 borrowed from nlp's idle quota); then each department queues one job
    submit(lab.alice, gpus=4)
    submit(lab.alice, gpus=2)
    go(run_cycle)
    submit(lab.alice, gpus=4, name="vision-waits")
    submit(lab.bob, gpus=4, name="nlp-waits")
    go(run_cycle)
    return lab


def test_the_api_states_borrowed_lent_history_and_the_factor(busy, client_for):
    r = client_for(busy.vadmin).get("/api/v1/fair-share")
    assert r.status_code == 200, r.content
    (vision,) = r.json()
    assert vision["department"] == "vision"
    a100 = next(s for s in vision["scopes"] if s["scope"] == "a100-80gb")
    assert (a100["guaranteed"], a100["used"], a100["borrowed"], a100["lent"]) == (4, 6, 2, 0.0)
    assert vision["history"]["running_share"] == 1.0 and vision["history"]["entitled_share"] == 0.5
    assert vision["use_ratio"] > 1 > vision["factor"]
    (place,) = vision["queue"]
    assert place["name"] == "vision-waits" and place["place"] == 2 and place["place_at_par"] <= 2
    everyone = {s["department"]: s for s in client_for(busy.root).get("/api/v1/fair-share").json()}
    assert {"vision", "nlp"} <= set(everyone)
    nlp = next(s for s in everyone["nlp"]["scopes"] if s["scope"] == "a100-80gb")
    assert (nlp["used"], nlp["lent"]) == (0, 2.0)  # what vision borrows is nlp's idle quota
    assert everyone["nlp"]["factor"] > 1 and everyone["nlp"]["queue"][0]["place"] == 1


def test_a_member_sees_only_their_department_and_may_not_name_another(busy, client_for):
    assert [s["department"] for s in client_for(busy.bob).get("/api/v1/fair-share").json()] == ["nlp"]
    assert client_for(busy.bob).get("/api/v1/fair-share?department=vision").json() == []
    assert client_for(busy.bob).get("/api/v1/fair-share?nope=1").status_code == 400


def test_the_page_shows_the_statement(busy, client):
    client.force_login(busy.alice)
    html = client.get("/fair-share/").content.decode()
    assert 'id="fair-share-vision"' in html and 'id="fair-share-nlp"' not in html
    assert "vision-waits" in html and "nlp-waits" not in html and "Fair-share factor" in html
    assert 'href="/fair-share/"' in client.get("/").content.decode()
