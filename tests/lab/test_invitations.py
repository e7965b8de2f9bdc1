"""Invitations: a member added without single sign-on is e-mailed, once and after commit, a link to choose a
password; the link works once and expires; bad input is a field error; admins invite only into departments
they administer; an existing account and single sign-on need no invitation."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core import mail
from django.test import Client

from notifications.models import Delivery
from portal.models import AuditEntry, Membership

pytestmark = pytest.mark.django_db

LINK = re.compile(r"https?://[^/\s]+(/accounts/set-password/[^/\s]+/[^/\s]+/)")
ADD = {"action": "add", "role": "researcher", "user_tier": "standard"}


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _add(c, capture, **fields):
    with capture(execute=True) as callbacks:
        r = c.post("/lab/departments/vision/", {**ADD, **fields})
        assert mail.outbox == []  # nothing leaves before the transaction commits
    return r, callbacks


def _link(message) -> str:
    return LINK.search(message.body).group(1)


def test_a_new_member_is_invited_once_after_commit_and_the_link_sets_a_password_and_signs_in(
        lab, django_capture_on_commit_callbacks):
    r, _ = _add(_client(lab.vadmin), django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    assert r.status_code == 302
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["zoe@uni.example"] and "invited to the GPU portal (vision)" in message.subject
    assert "vadmin added you to Vision (vision) as Researcher. Your user name is zoe." in message.body
    assert "unsubscribe" not in message.body.lower()  # an account's own mail, not a notification to turn off
    assert Delivery.objects.get().status == "sent"
    link = _link(message)
    zoe = get_user_model().objects.get(username="zoe")
    assert not zoe.has_usable_password() and zoe.last_login is None
    assert zoe.email not in str(list(AuditEntry.objects.filter(action="membership.add").values("new")))
    visitor = Client()
    r = visitor.get(link)
    assert r.status_code == 302 and r["Location"].endswith("/choose/")  # the token leaves the address bar
    form = visitor.get(r["Location"])
    assert form.status_code == 200 and b"Choose your password" in form.content
    r = visitor.post(r["Location"], {"new_password1": "short", "new_password2": "short"})
    assert r.status_code == 200 and b'data-error-for="new_password2"' in r.content  # the validators' words
    r = visitor.post(form.wsgi_request.path, {"new_password1": "a-long-enough-secret-9", "new_password2":
                                             "a-long-enough-secret-9"})
    assert r.status_code == 302 and r["Location"] == "/"
    zoe.refresh_from_db()
    assert zoe.check_password("a-long-enough-secret-9") and zoe.last_login is not None
    assert visitor.session["_auth_user_id"] == str(zoe.pk)  # signed in
    # used: refused, and it changes nothing
    again = Client().get(link)
    assert again.status_code == 400 and b'id="link-refused"' in again.content
    assert len(mail.outbox) == 1  # one e-mail, sent once


def test_an_expired_or_altered_link_is_refused(lab, django_capture_on_commit_callbacks, monkeypatch):
    _add(_client(lab.root), django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    link = _link(mail.outbox[0])
    altered = link[:-3] + ("a" if link[-3] != "a" else "b") + link[-2:]
    assert Client().get(altered).status_code == 400
    later = datetime.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 60)
    monkeypatch.setattr(default_token_generator, "_now", lambda: later)
    r = Client().get(link)
    assert r.status_code == 400 and b'id="link-refused"' in r.content
    assert not get_user_model().objects.get(username="zoe").has_usable_password()


@pytest.mark.parametrize(("email", "message"), [
    ("", "Give the new member&#x27;s e-mail address"),
    ("not-an-address", "Enter a valid email address."),
])
def test_a_new_member_without_a_valid_address_is_a_field_error(lab, django_capture_on_commit_callbacks, email,
                                                               message):
    r, _ = _add(_client(lab.vadmin), django_capture_on_commit_callbacks, username="zoe", email=email)
    assert r.status_code == 400
    page = r.content.decode()
    assert 'data-error-for="email"' in page and message in page
    assert not get_user_model().objects.filter(username="zoe").exists() and mail.outbox == []


def test_an_existing_account_gets_no_set_password_mail(lab, django_capture_on_commit_callbacks):
    Membership.objects.filter(user=lab.bob).delete()  # bob left nlp; his account and password stay
    r, _ = _add(_client(lab.vadmin), django_capture_on_commit_callbacks, username="bob", email="")
    assert r.status_code == 302 and Membership.objects.get(user=lab.bob).department == lab.vision
    r, _ = _add(_client(lab.root), django_capture_on_commit_callbacks, username="stranger", email="s@x.test")
    assert r.status_code == 302
    assert mail.outbox == [] and not AuditEntry.objects.filter(action="membership.invite").exists()
    page = _client(lab.vadmin).get("/lab/departments/vision/").content.decode()
    assert "Resend the invitation to bob" not in page


def test_an_admin_invites_only_into_a_department_they_administer(lab, django_capture_on_commit_callbacks):
    c = _client(lab.nadmin)
    r, _ = _add(c, django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    assert r.status_code == 404 and not get_user_model().objects.filter(username="zoe").exists()
    _add(_client(lab.vadmin), django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    with django_capture_on_commit_callbacks(execute=True):
        assert c.post("/lab/departments/vision/members/zoe/invite").status_code == 404
        assert _client(lab.alice).post("/lab/departments/vision/members/zoe/invite").status_code == 403
    assert len(mail.outbox) == 1


def test_the_member_page_shows_the_invitation_and_resends_it(lab, django_capture_on_commit_callbacks):
    c = _client(lab.vadmin)
    _add(c, django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    page = c.get("/lab/departments/vision/").content.decode()
    row = page[page.index('data-member="zoe"'):]
    row = row[:row.index("</tr>")]
    assert "not yet signed in" in row and "Resend invitation" in row
    first = _link(mail.outbox[0])
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post("/lab/departments/vision/members/zoe/invite")
    assert r.status_code == 302 and len(mail.outbox) == 2 and mail.outbox[1].to == ["zoe@uni.example"]
    second = _link(mail.outbox[1])
    visitor = Client()
    choose = visitor.get(second)["Location"]
    assert visitor.post(choose, {"new_password1": "a-long-enough-secret-9",
                                 "new_password2": "a-long-enough-secret-9"}).status_code == 302
    assert Client().get(first).status_code == 400  # one password per invitation: the other link is spent too
    page = c.get("/lab/departments/vision/").content.decode()
    assert "not yet signed in" not in page[page.index('data-member="zoe"'):].split("</tr>")[0]
    r = c.post("/lab/departments/vision/members/zoe/invite")  # signed in: nothing to resend
    assert r.status_code == 400 and "has signed in already" in r.content.decode() and len(mail.outbox) == 2


def test_with_single_sign_on_nobody_is_invited(lab, settings, django_capture_on_commit_callbacks):
    settings.SSO_ENABLED = True
    c = _client(lab.vadmin)
    r, _ = _add(c, django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    assert r.status_code == 302 and mail.outbox == []
    r, _ = _add(c, django_capture_on_commit_callbacks, username="yan", email="")  # linked at sign-in, or a name
    assert r.status_code == 302
    page = c.get("/lab/departments/vision/").content.decode()
    assert "Single sign-on is on" in page and "invitation" not in page.split('id="invitation-note"')[0].lower()
    assert c.post("/lab/departments/vision/members/zoe/invite").status_code == 400


def test_the_api_invites_too(lab, client_for, django_capture_on_commit_callbacks):
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/departments/vision/members", {"username": "zoe"}, format="json")
    assert r.status_code == 400 and "email" in r.json()["error"]["fields"]
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post("/api/v1/departments/vision/members", {"username": "zoe", "email": "zoe@uni.example"},
                   format="json")
    assert r.status_code == 201 and len(mail.outbox) == 1 and _link(mail.outbox[0])


def test_the_link_is_never_stored_and_no_webhook_or_preference_can_take_the_invitation(
        lab, client_for, django_capture_on_commit_callbacks):
    from notifications.models import Event

    _add(_client(lab.vadmin), django_capture_on_commit_callbacks, username="zoe", email="zoe@uni.example")
    token = _link(mail.outbox[0]).rstrip("/").rsplit("/", 1)[1]
    event = Event.objects.get(kind="account.invited")
    assert token not in str(event.data) and "token" not in event.data
    c = client_for(lab.vadmin)
    r = c.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/x", "scope": "department",
                                                  "kinds": ["account.invited"]}, format="json")
    assert r.status_code == 400 and "kinds.0" in r.json()["error"]["fields"]
    kinds = {p["kind"] for p in c.get("/api/v1/notifications/preferences").json()["preferences"]}
    assert "account.invited" not in kinds and "job.failed" in kinds
