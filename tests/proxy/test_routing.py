"""Pure routing rules of the fault proxy: which upstream a request goes to."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.proxy.routing import (
    ENVD_PORT,
    HEADER_ROUTED_DOMAINS,
    HOP_BY_HOP,
    domain_of_api_url,
    envd_target,
    forward_headers,
    is_loopback,
    join_url,
    sandbox_base_url,
)
from pytest_e2b_env.wire.recording import internet_of_create, sandbox_of_answer

ids = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=24)
header_names = st.sampled_from(
    ["Content-Type", "X-Access-Token", "Connect-Timeout-Ms", "E2b-Sandbox-Id", "Host"]
)


def test_control_plane_request_has_no_sandbox() -> None:
    """A request without E2b-Sandbox-Id is control plane."""
    assert envd_target([("X-API-KEY", "k"), ("Content-Type", "application/json")]) is None


@given(ids, st.integers(min_value=1, max_value=65535))
def test_envd_target_reads_headers_case_insensitively(sandbox_id: str, port: int) -> None:
    """Sandbox id and port come from the SDK's headers whatever their case."""
    assert envd_target([("e2b-sandbox-id", sandbox_id), ("E2B-SANDBOX-PORT", str(port))]) == (
        sandbox_id,
        port,
    )


@given(ids, st.sampled_from(["", "abc", "-1", " "]))
def test_envd_target_defaults_to_envd_port(sandbox_id: str, port: str) -> None:
    """A missing or malformed port means envd's own port."""
    assert envd_target([("E2b-Sandbox-Id", sandbox_id), ("E2b-Sandbox-Port", port)]) == (
        sandbox_id,
        ENVD_PORT,
    )


@given(ids, st.integers(min_value=1, max_value=65535))
def test_fixed_sandbox_url_wins(sandbox_id: str, port: int) -> None:
    """An emulator's fixed sandbox URL serves every sandbox and port."""
    url = sandbox_base_url(sandbox_id, port, sandbox_url="http://127.0.0.1:9/", domain="e2b.app")
    assert url == "http://127.0.0.1:9"


@given(ids, st.sampled_from(sorted(HEADER_ROUTED_DOMAINS)))
def test_known_domains_route_through_the_edge(sandbox_id: str, domain: str) -> None:
    """Known E2B domains route by headers through sandbox.<domain>, as the SDK does."""
    assert sandbox_base_url(sandbox_id, 49983, sandbox_url=None, domain=domain) == f"https://sandbox.{domain}"


@given(ids, st.integers(min_value=1, max_value=65535))
def test_other_domains_get_a_host_per_port(sandbox_id: str, port: int) -> None:
    """Self-hosted domains get https://<port>-<id>.<domain>."""
    url = sandbox_base_url(sandbox_id, port, sandbox_url=None, domain="sbx.example.org")
    assert url == f"https://{port}-{sandbox_id}.sbx.example.org"


def test_no_domain_and_no_sandbox_url_names_the_fix() -> None:
    """Without a domain or sandbox URL the error says what to pass."""
    with pytest.raises(ValueError, match="upstream_sandbox_url"):
        sandbox_base_url("i1", 49983, sandbox_url=None, domain=None)


def test_is_loopback() -> None:
    """Loopback URLs are recognised; E2B's API is not loopback."""
    assert is_loopback("http://127.0.0.1:3000")
    assert is_loopback("http://localhost:3000/")
    assert is_loopback("http://[::1]:3000")
    assert not is_loopback("https://api.e2b.app")
    assert not is_loopback("http://10.0.0.7:3000")


def test_domain_of_api_url() -> None:
    """api.<domain> gives the domain; anything else gives None."""
    assert domain_of_api_url("https://api.e2b.app") == "e2b.app"
    assert domain_of_api_url("https://api.sbx.example.org/") == "sbx.example.org"
    assert domain_of_api_url("http://127.0.0.1:3000") is None
    assert domain_of_api_url("https://api.localhost") is None


@given(
    st.lists(st.tuples(header_names | st.sampled_from(sorted(HOP_BY_HOP)), st.text(max_size=8)), max_size=12)
)
def test_forward_headers_drops_only_hop_by_hop(headers: list[tuple[str, str]]) -> None:
    """Hop-by-hop headers go; every other header stays, in order, duplicates kept."""
    kept = forward_headers(headers)
    assert kept == [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]


@given(
    st.from_regex(r"/[a-zA-Z0-9._%/-]{0,30}", fullmatch=True),
    st.from_regex(r"[a-z0-9=&%]{0,20}", fullmatch=True),
)
def test_join_url_keeps_path_and_query_verbatim(path: str, query: str) -> None:
    """Path (with percent escapes) and query reach the upstream unchanged."""
    url = join_url("https://api.e2b.app/", path, query)
    assert url == "https://api.e2b.app" + path + (f"?{query}" if query else "")


@given(
    st.sampled_from([None, True, False]),
    st.lists(st.sampled_from(["0.0.0.0/0", "10.0.0.0/8", "1.1.1.1"]), max_size=3),
)
def test_internet_of_create_follows_e2b_rules(allow: bool | None, deny: list[str]) -> None:
    """Internet is off when allow_internet_access is false or denyOut blocks 0.0.0.0/0."""
    body: dict[str, object] = {"templateID": "base", "network": {"denyOut": deny}}
    if allow is not None:
        body["allow_internet_access"] = allow
    expected = allow is not False and "0.0.0.0/0" not in deny
    assert internet_of_create(json.dumps(body).encode()) is expected


def test_internet_of_create_unparsable_is_unknown() -> None:
    """A body that is not a JSON object says nothing about internet access."""
    assert internet_of_create(b"not json") is None
    assert internet_of_create(b"[1, 2]") is None


@given(ids, st.sampled_from([None, "e2b.app", "sbx.example.org"]))
def test_sandbox_of_answer_reads_id_and_domain(sandbox_id: str, domain: str | None) -> None:
    """A create/connect answer gives the new sandbox's id and domain."""
    body = json.dumps({"sandboxID": sandbox_id, "templateID": "base", "domain": domain}).encode()
    assert sandbox_of_answer(body) == (sandbox_id, domain)


@given(st.binary(max_size=64))
def test_sandbox_of_answer_never_raises(body: bytes) -> None:
    """Any answer body, however malformed, yields a pair instead of an exception."""
    sandbox_id, domain = sandbox_of_answer(body)
    assert sandbox_id is None or isinstance(sandbox_id, str)
    assert domain is None or isinstance(domain, str)
