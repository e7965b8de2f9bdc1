"""The installation's identity: the operator's setting, else one generated once and kept in the database, the
same for every process and restart; a bad setting is refused with a clear message."""

from __future__ import annotations

import pytest

from portal import installation
from portal.config import INSTALLATION_ID
from portal.models import Installation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh():
    installation.forget()
    yield
    installation.forget()


def test_the_setting_wins(settings):
    settings.PORTAL_INSTALLATION_ID = "lab-prod"
    assert installation.installation_id() == "lab-prod"
    assert not Installation.objects.exists()


def test_without_a_setting_one_is_generated_once_and_kept(settings):
    settings.PORTAL_INSTALLATION_ID = ""
    first = installation.installation_id()
    assert INSTALLATION_ID.fullmatch(first)
    installation.forget()  # another process, or a restart
    assert installation.installation_id() == first
    assert Installation.objects.count() == 1


def test_two_installations_generate_different_ones(settings):
    settings.PORTAL_INSTALLATION_ID = ""
    first = installation.installation_id()
    Installation.objects.all().delete()  # a fresh database: another installation
    installation.forget()
    assert installation.installation_id() != first


@pytest.mark.parametrize("value", ["-lab", "lab_", "a" * 64, "lab prod", "lab/prod"])
def test_a_value_that_is_no_label_value_is_refused(value):
    from portal import config

    with pytest.raises(config.ConfigError) as exc:
        config.load({"PORTAL_INSTALLATION_ID": value})
    assert any("PORTAL_INSTALLATION_ID" in p for p in exc.value.problems)


def test_a_label_value_is_accepted():
    from portal import config

    assert config.load({"PORTAL_INSTALLATION_ID": "lab-prod.2"})["PORTAL_INSTALLATION_ID"] == "lab-prod.2"
