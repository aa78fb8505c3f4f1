"""Who the harness's requests look like: a pool of ordinary clients of a JSON API.

Nothing in a request names the harness. Each visitor is drawn (seeded) from
:data:`CLIENTS`, a pool written from what common browsers' ``fetch``, mobile apps' HTTP
stacks and command-line tools send to a JSON endpoint over HTTP/1.1, weighted roughly by
their share of a shop's traffic, and from :data:`LANGUAGES` for the clients that send an
Accept-Language. The headers go out in the client's own order. The load generator and the
prober draw from the same pool with the same code, so no request attribute tells them apart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Placeholders in a client's header template, filled per request.
HOST = "{host}"
LANGUAGE = "{lang}"

_JSON_ACCEPT = "application/json, text/plain, */*"


@dataclass(frozen=True)
class Client:
    """One kind of ordinary client: its headers, in the order it sends them."""

    kind: str  # for tests and docs only; never sent
    weight: int
    headers: tuple[tuple[str, str], ...]

    def render(self, host: str, language: str) -> list[tuple[str, str]]:
        """The headers for one request to ``host``."""
        return [
            (name, value.replace(HOST, host).replace(LANGUAGE, language))
            for name, value in self.headers
        ]


def _chrome(platform: str, ua: str, mobile: str = "?0") -> tuple[tuple[str, str], ...]:
    return (
        ("Host", HOST),
        ("Connection", "keep-alive"),
        ("sec-ch-ua", '"Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"'),
        ("Accept", _JSON_ACCEPT),
        ("sec-ch-ua-mobile", mobile),
        ("User-Agent", ua),
        ("sec-ch-ua-platform", platform),
        ("Sec-Fetch-Site", "same-origin"),
        ("Sec-Fetch-Mode", "cors"),
        ("Sec-Fetch-Dest", "empty"),
        ("Accept-Encoding", "gzip, deflate, br, zstd"),
        ("Accept-Language", LANGUAGE),
    )


def _firefox(ua: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Host", HOST),
        ("User-Agent", ua),
        ("Accept", _JSON_ACCEPT),
        ("Accept-Language", LANGUAGE),
        ("Accept-Encoding", "gzip, deflate, br, zstd"),
        ("Connection", "keep-alive"),
        ("Sec-Fetch-Dest", "empty"),
        ("Sec-Fetch-Mode", "cors"),
        ("Sec-Fetch-Site", "same-origin"),
    )


def _safari(ua: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Host", HOST),
        ("Accept", _JSON_ACCEPT),
        ("Sec-Fetch-Site", "same-origin"),
        ("Accept-Language", LANGUAGE),
        ("Accept-Encoding", "gzip, deflate, br"),
        ("Sec-Fetch-Mode", "cors"),
        ("User-Agent", ua),
        ("Connection", "keep-alive"),
        ("Sec-Fetch-Dest", "empty"),
    )


CLIENTS: tuple[Client, ...] = (
    Client(
        "chrome-windows",
        28,
        _chrome(
            '"Windows"',
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/124.0.0.0 Safari/537.36",
        ),
    ),
    Client(
        "chrome-macos",
        9,
        _chrome(
            '"macOS"',
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like "
            "Gecko) Chrome/124.0.0.0 Safari/537.36",
        ),
    ),
    Client(
        "chrome-android",
        16,
        _chrome(
            '"Android"',
            "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/124.0.0.0 Mobile Safari/537.36",
            mobile="?1",
        ),
    ),
    Client(
        "edge-windows",
        6,
        _chrome(
            '"Windows"',
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.0.0",
        ),
    ),
    Client(
        "safari-iphone",
        15,
        _safari(
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1"
        ),
    ),
    Client(
        "safari-macos",
        5,
        _safari(
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like "
            "Gecko) Version/17.4.1 Safari/605.1.15"
        ),
    ),
    Client(
        "firefox-windows",
        6,
        _firefox(
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0"
        ),
    ),
    Client(
        "firefox-linux",
        2,
        _firefox("Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"),
    ),
    Client(
        "ios-app",
        5,
        (
            ("Host", HOST),
            ("Accept", "application/json"),
            ("Accept-Language", LANGUAGE),
            ("Connection", "keep-alive"),
            ("Accept-Encoding", "gzip, deflate, br"),
            ("User-Agent", "ShopApp/5.12.1 CFNetwork/1494.0.7 Darwin/23.4.0"),
        ),
    ),
    Client(
        "android-app",
        5,
        (
            ("Accept", "application/json"),
            ("Accept-Language", LANGUAGE),
            ("Host", HOST),
            ("Connection", "Keep-Alive"),
            ("Accept-Encoding", "gzip"),
            ("User-Agent", "okhttp/4.12.0"),
        ),
    ),
    Client(
        "python-requests",
        1,
        (
            ("Host", HOST),
            ("User-Agent", "python-requests/2.31.0"),
            ("Accept-Encoding", "gzip, deflate"),
            ("Accept", "*/*"),
            ("Connection", "keep-alive"),
        ),
    ),
    Client(
        "curl",
        1,
        (
            ("Host", HOST),
            ("User-Agent", "curl/8.5.0"),
            ("Accept", "*/*"),
        ),
    ),
    Client(
        "go-http",
        1,
        (
            ("Host", HOST),
            ("User-Agent", "Go-http-client/1.1"),
            ("Accept-Encoding", "gzip"),
        ),
    ),
)

LANGUAGES: tuple[tuple[str, int], ...] = (
    ("en-US,en;q=0.9", 40),
    ("en-GB,en;q=0.9", 12),
    ("de-DE,de;q=0.9,en;q=0.8", 12),
    ("fr-FR,fr;q=0.9,en-US;q=0.8,en;q=0.7", 9),
    ("es-ES,es;q=0.9", 7),
    ("nl-NL,nl;q=0.9,en-US;q=0.8,en;q=0.7", 5),
    ("it-IT,it;q=0.9,en-US;q=0.8,en;q=0.7", 5),
    ("pl-PL,pl;q=0.9,en-US;q=0.8,en;q=0.7", 4),
    ("sv-SE,sv;q=0.9,en-US;q=0.8,en;q=0.7", 3),
    ("en", 3),
)


@dataclass(frozen=True)
class Visitor:
    """One visitor's client and language, kept for all its requests."""

    client: Client
    language: str

    def headers(self, host: str) -> list[tuple[str, str]]:
        return self.client.render(host, self.language)


def draw_visitor(rng: random.Random) -> Visitor:
    """A visitor as one arrives: a client from :data:`CLIENTS`, a language from
    :data:`LANGUAGES`, each by its weight."""
    client = rng.choices(CLIENTS, weights=[c.weight for c in CLIENTS])[0]
    language = rng.choices([lang for lang, _ in LANGUAGES], weights=[w for _, w in LANGUAGES])[0]
    return Visitor(client, language)
