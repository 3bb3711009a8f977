"""Domain patterns, host normalisation and local/private destinations (upstream semantics)."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess

import pytest

from codespace_linux_sandbox.proxy.rules import (DomainRules, is_local_or_private, is_this_host, normalize_host,
                                                 read_host_addresses)


@pytest.mark.parametrize("pattern, host, matches", [
    ("example.com", "example.com", True),
    ("example.com", "www.example.com", False),
    ("*.example.com", "www.example.com", True),
    ("*.example.com", "a.b.example.com", True),
    ("*.example.com", "example.com", False),
    ("*.example.com", "badexample.com", False),
    ("**.example.com", "example.com", True),
    ("**.example.com", "deep.sub.example.com", True),
    ("**.example.com", "example.com.evil.org", False),
    ("EXAMPLE.COM.", "example.com", True),
    ("*", "anything.at.all", True),
])
def test_patterns(pattern, host, matches):
    assert DomainRules([pattern], []).check_host(host).allowed is matches


def test_deny_wins_and_empty_allow_blocks_everything():
    rules = DomainRules(["**.example.com"], ["secret.example.com"])
    assert rules.check_host("secret.example.com").header == "blocked-by-denylist"
    assert rules.check_host("www.example.com").allowed
    assert DomainRules([], []).check_host("example.com").header == "blocked-by-allowlist"


@pytest.mark.parametrize("raw, normal", [
    ("Example.COM", "example.com"), ("example.com.", "example.com"), ("example.com:8443", "example.com"),
    ("[2001:db8::1]:443", "2001:db8::1"), ("bücher.de", "xn--bcher-kva.de"), ("127.0.0.1", "127.0.0.1"),
])
def test_normalisation(raw, normal):
    assert normalize_host(raw) == normal


@pytest.mark.parametrize("raw", ["", "a b.com", "exa$mple.com", "[::1", "x" * 64 + ".com", "..."])
def test_unusable_hosts(raw):
    assert normalize_host(raw) is None


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
    "0.0.0.0", "0.1.2.3", "100.64.0.1", "192.0.0.8", "192.0.2.1", "198.18.0.1", "198.19.255.1", "198.51.100.7",
    "203.0.113.9", "224.0.0.1", "239.1.1.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fc00::1", "fd12::1",
    "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1",
])
def test_local_and_private_addresses(address):
    assert is_local_or_private(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "192.88.99.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses(address):
    assert not is_local_or_private(address)


def test_limited_mode_and_local_binding():
    limited = DomainRules(["example.com"], [], limited=True)
    assert limited.check_method("GET").allowed and limited.check_method("head").allowed
    assert limited.check_method("POST").header == "blocked-by-method-policy"
    assert DomainRules(["x"], []).check_addresses(["10.0.0.1"]).reason == "private-address"
    assert DomainRules(["x"], [], allow_local_binding=True).check_addresses(["10.0.0.1"]).allowed


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 to list this host's addresses")
def test_this_hosts_addresses_are_read_and_local():
    """This machine's addresses, as iproute2 lists them, are what the proxy reads (rtnetlink)
    and all of them are local (the proxy test in a namespace of its own covers one outside the
    fixed ranges, added and removed while the proxy runs)."""
    listed = json.loads(subprocess.run(["ip", "-j", "addr", "show"], check=True, capture_output=True).stdout)
    expected = {ipaddress.ip_address(a["local"]) for link in listed for a in link.get("addr_info", [])}
    assert read_host_addresses() == expected
    for address in expected:
        assert is_local_or_private(str(address)) and is_this_host(str(address))


@pytest.mark.parametrize("address, here", [
    ("127.0.0.1", True), ("127.8.0.1", True), ("0.0.0.0", True), ("::", True), ("::1", True),
    ("::ffff:127.0.0.1", True), ("10.255.1.2", False), ("8.8.8.8", False), ("192.88.99.1", False),
])
def test_what_reaches_this_host_whatever_its_interfaces(address, here):
    assert is_this_host(address) is here
