"""Accounts a lab file creates: a ``password_env`` that names no set variable is an error with its line (the
account could not sign in otherwise), and the platform-admin role carries the Django admin with it, both ways."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from lab.services.labfile import LabFileInvalid, apply_lab

pytestmark = pytest.mark.django_db

LAB = """\
departments:
  - slug: vision
    name: Computer Vision
    members:
      - {user: alice, email: alice@lab.example, role: ROLE, PASSWORD}
"""


def _lab(role: str = "researcher", extra: str = "tier: standard") -> str:
    return LAB.replace("ROLE", role).replace("PASSWORD", extra)


def test_an_unset_password_variable_is_an_error_with_its_line(monkeypatch):
    monkeypatch.delenv("LAB_ALICE_PASSWORD", raising=False)
    for dry_run in (True, False):
        with pytest.raises(LabFileInvalid) as exc:
            apply_lab(_lab(extra="password_env: LAB_ALICE_PASSWORD"), dry_run=dry_run)
        [err] = exc.value.errors
        assert err.path == ("departments", 0, "members", 0, "password_env") and err.line == 5
        assert "LAB_ALICE_PASSWORD is not set" in err.message
    assert not get_user_model().objects.filter(username="alice").exists()  # nothing half-applied
    monkeypatch.setenv("LAB_ALICE_PASSWORD", "")  # empty is no password either
    with pytest.raises(LabFileInvalid):
        apply_lab(_lab(extra="password_env: LAB_ALICE_PASSWORD"))


def test_a_set_password_variable_gives_the_password_and_an_existing_one_is_kept(monkeypatch):
    monkeypatch.setenv("LAB_ALICE_PASSWORD", "s3cret-from-env")
    apply_lab(_lab(extra="password_env: LAB_ALICE_PASSWORD"))
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password("s3cret-from-env")
    # the account has its password: moving it without the variable (an exported file elsewhere) is no error
    monkeypatch.delenv("LAB_ALICE_PASSWORD")
    apply_lab(_lab(extra="password_env: LAB_ALICE_PASSWORD").replace("vision", "nlp"))
    alice.refresh_from_db()
    assert alice.check_password("s3cret-from-env") and alice.membership.department.slug == "nlp"


def test_a_platform_admin_from_the_file_opens_the_admin_and_loses_it_with_the_role(monkeypatch):
    monkeypatch.setenv("LAB_ALICE_PASSWORD", "s3cret-from-env")
    apply_lab(_lab(role="platform_admin", extra="password_env: LAB_ALICE_PASSWORD"))
    alice = get_user_model().objects.get(username="alice")
    assert alice.is_staff
    c = Client()
    assert c.login(username="alice", password="s3cret-from-env")
    assert c.get("/admin/").status_code == 200
    assert c.get("/admin/portal/department/").status_code == 200
    apply_lab(_lab(role="researcher", extra="password_env: LAB_ALICE_PASSWORD"))
    alice.refresh_from_db()
    assert not alice.is_staff and not alice.is_superuser
    assert c.get("/admin/").status_code == 302  # to the admin's login: no longer staff


def test_a_pruned_platform_admin_loses_the_admin():
    apply_lab(_lab(role="platform_admin"))
    apply_lab(LAB.replace("    members:\n      - {user: alice, email: alice@lab.example, role: ROLE, PASSWORD}\n",
                          "    members: []\n"), prune=True)
    alice = get_user_model().objects.get(username="alice")
    assert not alice.is_staff and not alice.is_superuser
