"""One member of a large JSON object, cut out of a file without reading the file into memory.

Azure's poll answer carries the whole ``analyzeResult`` inline (up to 500 MB) beside a few small members
(``status``, the times, ``error``). The run's result is that one member: :func:`split_member` maps the
file (``mmap``: pages the kernel can drop, not the process's heap), lets msgspec decode the object with
each member as ``msgspec.Raw`` (the member's bytes, validated and referenced, not copied or built into
Python objects: about 0.5 s for 55 MB), writes the wanted member to a file of its own and decodes the
small others.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import msgspec

_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SLICE = 8 * 1024 * 1024


class NotAnObject(ValueError):
    """The file is not one JSON object whose small members fit the bound."""


@dataclass(frozen=True)
class Split:
    head: dict[str, Any]  # every member but the big one
    path: str | None  # the member's JSON, in a file of its own (the caller's to remove); None: absent
    size: int


def split_member(path: str, member: str, *, head_limit: int = 1024 * 1024) -> Split:
    """The object in ``path`` with ``member`` cut out into a file of its own. The other members together
    may take at most ``head_limit`` bytes. Raises :class:`NotAnObject`."""
    with open(path, "rb") as source:
        if os.fstat(source.fileno()).st_size == 0:
            raise NotAnObject("empty")
        with mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return _split(view, member, head_limit)
            finally:
                view.release()


def _split(view: memoryview, member: str, head_limit: int) -> Split:
    try:
        members = _MEMBERS.decode(view)
    except msgspec.DecodeError as exc:
        raise NotAnObject(f"not a JSON object: {exc}") from None
    try:
        wanted = members.pop(member, None)
        rest = sum(len(raw) for raw in members.values())
        if rest > head_limit:
            raise NotAnObject(f"the members beside {member!r} take {rest} bytes, more than {head_limit}")
        head = {name: msgspec.json.decode(raw) for name, raw in members.items()}
        if wanted is None:
            return Split(head, None, 0)
        return Split(head, _write(wanted), len(wanted))
    finally:
        # The Raw values reference the mapping: drop them before it closes.
        members.clear()
        wanted = None


def _write(raw: msgspec.Raw) -> str:
    fd, path = tempfile.mkstemp(prefix="hookbridge-result-")
    try:
        with os.fdopen(fd, "wb") as out:
            data = memoryview(raw)
            try:
                for start in range(0, len(data), _SLICE):
                    out.write(data[start : start + _SLICE])
            finally:
                data.release()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path
