"""A vendor's paged or sharded result written out as one JSON document, bounded: held in memory while
small and moved to a temporary file past ``spill_bytes``, so a large one is never held whole.

The writer takes JSON a piece at a time: ``raw`` fragments of the document's frame (``{"Blocks":[``) and
``item`` values inside a list (it puts the commas). Textract's pages append their ``Blocks``; Document
AI's shards go into each document's ``shards``. The bytes are ``orjson``'s compact JSON of the same
object, whichever way they are kept.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import IO, Any

import orjson

from service.vendors.base import ResultFile, VendorResultTooLarge


class Assembled:
    """What the writer made: ``value`` (small: parsed back) or ``path`` (a file of ``size`` bytes that the
    caller owns and removes)."""

    def __init__(self, value: Any = None, path: str | None = None, size: int = 0) -> None:
        self.value, self.path, self.size = value, path, size


class JsonWriter:
    """Writes one JSON document up to ``cap`` bytes (VendorResultTooLarge past it)."""

    def __init__(self, *, cap: int, spill_bytes: int) -> None:
        self._cap = cap
        self._spill = spill_bytes
        self._out: IO[bytes] = io.BytesIO()
        self._path: str | None = None
        self._size = 0
        self._first = [True]  # one flag per open list: whether its next item is its first

    @property
    def size(self) -> int:
        return self._size

    def raw(self, fragment: bytes) -> None:
        """A fragment of the frame; ``[`` opens a list whose items :meth:`item` separates, ``]`` closes it."""
        self._write(fragment)
        for char in fragment:
            if char == ord("["):
                self._first.append(True)
            elif char == ord("]"):
                self._first.pop()

    def key(self, name: str, value: Any, *, last: bool = False) -> None:
        """``"name":value,`` (without the comma when ``last``)."""
        self._write(orjson.dumps(name) + b":" + orjson.dumps(value) + (b"" if last else b","))

    def item(self, value: Any) -> None:
        self.item_raw(orjson.dumps(value))

    def item_raw(self, encoded: bytes) -> None:
        """An item already encoded as JSON (a shard read from storage, checked by the caller)."""
        first = self._first[-1]
        self._first[-1] = False
        self._write(encoded if first else b"," + encoded)

    def begin_item(self) -> None:
        """Opens an item written in fragments (its own ``{...}``): the comma before it, if any."""
        first = self._first[-1]
        self._first[-1] = False
        if not first:
            self._write(b",")

    def _write(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._cap:
            self.discard()
            raise VendorResultTooLarge(f"the result is larger than {self._cap} bytes")
        if self._path is None and self._size > self._spill:
            self._to_file()
        self._out.write(data)

    def _to_file(self) -> None:
        assert isinstance(self._out, io.BytesIO)
        handle, path = tempfile.mkstemp(prefix="hookbridge-result-", suffix=".json")
        spilled = os.fdopen(handle, "wb")
        spilled.write(self._out.getvalue())
        self._out, self._path = spilled, path

    def finish(self) -> Assembled:
        if self._path is None:
            assert isinstance(self._out, io.BytesIO)
            return Assembled(value=orjson.loads(self._out.getvalue()), size=self._size)
        self._out.close()
        return Assembled(path=self._path, size=self._size)

    def discard(self) -> None:
        """Drops what was written (a file included); for a result abandoned half-way."""
        self._out.close()
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
        self._out = io.BytesIO()


def hand_over(made: Assembled, keep_whole: int) -> Any:
    """The result as the worker takes it: JSON while it is no larger than what the store keeps whole
    (``MAX_DOCUMENT_BYTES``, read back from its file once), else the file (:class:`ResultFile`, no
    larger than the vendor's answer cap)."""
    if made.path is None:
        return made.value
    if made.size <= keep_whole:
        try:
            with open(made.path, "rb") as f:
                return orjson.loads(f.read())
        finally:
            os.unlink(made.path)
    return ResultFile(path=made.path, media_type="application/json", size=made.size)
