"""A department slug can never shadow a page: every fixed word of the URLconf is reserved."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import URLResolver, get_resolver

from portal.models import Department, reserved_slugs

pytestmark = pytest.mark.django_db


def _siblings_of_slug_routes() -> set[str]:
    """The fixed first segments of every URLconf level that also has a ``<slug>`` first segment: exactly the
    words a department slug would collide with (``/budgets/approvals/`` vs ``/budgets/<slug>/``)."""
    words: set[str] = set()

    def walk(patterns):
        firsts, has_slug = set(), False
        for p in patterns:
            first = re.split(r"/", str(p.pattern).lstrip("^"), maxsplit=1)[0]
            if "slug" in first:
                has_slug = True
            elif re.fullmatch(r"[a-z0-9-]+", first):
                firsts.add(first)
            if isinstance(p, URLResolver) and getattr(p, "app_name", None) != "admin":
                walk(p.url_patterns)
        if has_slug:
            words.update(firsts)

    walk(get_resolver().url_patterns)
    return words


def test_the_words_beside_a_slug_are_reserved():
    siblings = _siblings_of_slug_routes()
    assert {"approvals", "prices", "allowances"} <= siblings  # the budget pages' words
    assert siblings <= reserved_slugs()


def test_reserved_words_come_from_the_urlconf():
    words = reserved_slugs()
    assert {"approvals", "prices", "allowances", "jobs", "whatif", "lab", "api", "admin", "quota-requests"} <= words
    assert "vision" not in words and "nlp" not in words


@pytest.mark.parametrize("slug", ["approvals", "prices", "allowances"])
def test_the_model_refuses_a_reserved_slug(slug):
    with pytest.raises(ValidationError) as exc:
        Department(slug=slug, name="x").full_clean()
    assert exc.value.error_dict["slug"][0].code == "reserved"
