"""The rollback and unpin endpoints: their routes, API group and request bodies."""

from __future__ import annotations

import pytest

from inferd.codecs.repository import check_unpin_body, decode_rollback_body
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import Api
from inferd.frontends.http.routes import Endpoint, match_route


@pytest.mark.parametrize(
    ("action", "endpoint"),
    [("rollback", Endpoint.REPOSITORY_ROLLBACK), ("unpin", Endpoint.REPOSITORY_UNPIN)],
)
def test_the_routes_are_rollout_group_posts(action: str, endpoint: Endpoint) -> None:
    route = match_route(f"/v2/repository/models/my%20model/{action}")
    assert route is not None
    assert (route.endpoint, route.model, route.method) == (endpoint, "my model", "POST")
    assert route.api is Api.ROLLOUT  # closed without the admin token, unless opened
    assert match_route(f"/v2/repository/models/m/{action}/extra") is None


def test_a_rollback_body_names_a_version_or_nothing() -> None:
    assert decode_rollback_body({}) is None
    assert decode_rollback_body({"version": None}) is None
    assert decode_rollback_body({"version": 2}) == 2
    assert decode_rollback_body({"version": "12"}) == 12


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"version": True}, "a version number .* got a boolean"),
        ({"version": 1.5}, "a version number .* got a number"),
        ({"version": "two"}, "a version number .* got a string"),
        ({"version": 0}, "must be 1 or more, got 0"),
        ({"version": "-1"}, "got a string"),
        ({"to": 2}, "unknown rollback field 'to': expected 'version'"),
    ],
)
def test_a_bad_rollback_body_is_refused_by_name(body: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        decode_rollback_body(body)


def test_an_unpin_body_takes_no_fields() -> None:
    check_unpin_body({})
    with pytest.raises(InvalidArgumentError, match="unknown unpin field 'version'"):
        check_unpin_body({"version": 2})
