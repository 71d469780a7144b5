"""``OriginGuard`` on the real API server: every state-changing route refuses a foreign ``Host``
(DNS rebinding: 421), a foreign or cross-site ``Origin`` and an Origin-less CORS-simple body (CSRF:
403); GET stays open, the UI's same-origin POSTs and scripts' JSON POSTs pass, and
``--allowed-host`` / ``$SYNCLINE_API_ALLOWED_HOSTS`` admit other names."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import pytest

from syncline.api import ApiServer, ApiSettings
from syncline.api.origin import ALLOWED_HOSTS_ENV

from .conftest import Http, assert_error

PREPARE = "/api/tasks/prepare"
BUILD = "/api/runs/1/sealed-manifest/build"
CHALLENGE = "/api/runs/1/challenges/build"


def state_changing_routes(http: Http) -> list[tuple[str, str]]:
    """Every (method, path) of the API that is not GET, from its OpenAPI document."""
    spec = http.ok("/openapi.json")
    out = []
    for path, item in spec["paths"].items():
        for method in item:
            if method.upper() not in ("GET", "HEAD"):
                out.append((method.upper(), path.replace("{task_id}", "1")))
    return out


def test_a_rebinding_host_is_refused_on_every_state_changing_route(http: Http, api: ApiServer) -> None:
    port = urlsplit(api.url).port
    routes = state_changing_routes(http)
    assert ("POST", PREPARE) in routes and ("POST", BUILD) in routes and ("POST", CHALLENGE) in routes
    for method, path in routes:
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port + 1}", ""):
            reply = http.request(method, path, {}, headers={"Host": host})
            assert_error(reply, 421, "is not this server")
    # GET stays open whatever the Host (the read API, the web UI)
    assert http.request("GET", "/api/runs", headers={"Host": f"attacker.example:{port}"}).status == 200
    # the names of this server pass the guard (and reach the handler: 422 for an empty prepare body)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert http.request("POST", PREPARE, {}, headers={"Host": host}).status == 422


def test_cross_site_posts_are_refused(http: Http, api: ApiServer) -> None:
    port = urlsplit(api.url).port
    # CSRF: a form or text/plain body without a preflight, no Origin (or a page's cross-site fetch)
    simple = ("text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data")
    for ctype in simple:
        assert_error(http.request("POST", BUILD, raw=b"{}", content_type=ctype), 403, "without Origin")
        assert_error(http.request("POST", PREPARE, raw=b"{}", content_type=ctype), 403, "without Origin")
    for origin in (
        "http://attacker.example",
        f"http://attacker.example:{port}",
        f"http://127.0.0.1:{port + 1}",
        "null",
        f"file://127.0.0.1:{port}",
    ):
        reply = http.request("POST", PREPARE, {}, headers={"Origin": origin})
        assert_error(reply, 403, "may not change state")
    cross = http.request("POST", PREPARE, {}, headers={"Sec-Fetch-Site": "cross-site"})
    assert_error(cross, 403, "cross-site")
    # the UI's own POSTs (same origin) and scripts' JSON POSTs (no Origin) pass the guard
    assert http.request("POST", PREPARE, {}, headers={"Origin": f"http://127.0.0.1:{port}"}).status == 422
    assert http.request("POST", PREPARE, {}, headers={"Origin": f"http://localhost:{port}"}).status == 422
    assert http.request("POST", PREPARE, {}, headers={"Sec-Fetch-Site": "same-origin"}).status == 422
    assert http.post(PREPARE, {}).status == 422


def test_allowed_hosts_from_the_flag_and_the_environment(
    api_settings: ApiSettings, api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, "proxy.example:8443, ")
    settings = dataclasses.replace(api_settings, allowed_hosts=("syncline.test",))
    with ApiServer(settings) as server:
        http, port = Http(server.url), urlsplit(server.url).port
        for host in (f"syncline.test:{port}", "syncline.test", "proxy.example:8443"):
            assert http.request("POST", PREPARE, {}, headers={"Host": host}).status == 422, host
        reply = http.request(
            "POST", PREPARE, {}, headers={"Host": f"syncline.test:{port}", "Origin": f"http://syncline.test:{port}"}
        )
        assert reply.status == 422
        assert_error(http.request("POST", PREPARE, {}, headers={"Host": "proxy.example:1"}), 421)
        assert_error(http.request("POST", PREPARE, {}, headers={"Host": f"other.test:{port}"}), 421)
