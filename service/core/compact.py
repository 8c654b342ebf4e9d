"""A finished run's record in its compact form: kept for ``RETENTION_S``, seldom read again.

A run's record is written on every step while the run is in flight, so it stays plain JSON then: packing
it would cost each poll ~15 us (written and read once each). Once the run has ended it is written once or
twice more (its end; the vendor told of a cancel or a delete) and read only by ``GET /v1/runs``, so its
record is stored compact (``Run.to_json``; issue 30's lead "what could be compacted when the run ends"):

    {"c":"app1","vendor":"nutrient","op":"extract","ca":…,"ua":…,"status":"succeeded","version":14,"z":"…"}

- its head as ever: the fields up to ``version``, which the scripts read (``scripts.run_head``'s pattern in
  ``transition.lua``, ``repair.lua``'s ``cjson.decode``) and which every record writes first;
- then one field ``"z"``: base64 of the CRC-32 of the rest (4 bytes, big-endian) and the rest's JSON
  (``"vr":…}``) in raw deflate against :data:`_DICTIONARY`, what a finished run's fields repeat.

The CRC-32 makes a damaged record an error, never another run. A record whose rest is over
:data:`MAX_REST` bytes stays plain, so that neither side ever holds more than that in deflate (~0.4 ms to
pack 16 KiB of random text, once a run), as does one the form would not make shorter. Every
reader (``Run.from_json``) reads both forms; ``hookbridge spell-out-runs`` writes every record back plain
(with its id) before a rollback to a version that reads only the plain form (docs/deploy.md).

A finished run of ``bench.memory`` is stored in ~420 characters where the plain form took ~720: its
``MEMORY USAGE`` drops two of the allocator's size classes. Writing one takes ~10 us more than the plain
form, reading one ~5 us more (``python -m bench.records_codec``).
"""

from __future__ import annotations

import base64
import binascii
import zlib

__all__ = ["MARK", "MAX_REST", "compacted", "expanded"]

MARK = b',"z":"'  # after the head's version; no field of a run is stored as "z" (a test checks)
MAX_REST = 16 * 1024  # bytes of the rest's JSON; a larger one stays plain
_VERSION = b',"version":'
_WBITS = -12  # raw deflate, a 4 KiB window: the dictionary and the rest both fit
_LEVEL = 9
_MEM_LEVEL = 4  # the deflate state's size: ~7 us a record where the default (8) took ~17, most of it set-up

# What a finished run's fields after its version repeat (service/core/records.py's stored names, the trail's
# entries: service/core/trail.py, the error and usage shapes: service/core/runs.py, progress phases such as
# the Nutrient simulator's), the most common last: deflate finds a match at a shorter distance there. Never
# edit it: stored records depend on these bytes (a new dictionary needs a new field name, and readers keep
# this one).
_DICTIONARY = (
    b'"er":{"code":"vendor_failed","message":"","vendor_status":"failed","details":{}},"vd":true,"zr":true,'
    b'"st":{},"rt":"application/json","tp":"00-","rl":1,"va":1,"tf":1,"o":{},"s":["sub_"],"vs":"FAILED",'
    b'"vs":"SUCCEEDED","vs":"succeeded","vs":"completed","p":{"percent":100.0,"phase":null,"message":null},'
    b'"m":{},"co":17,"n":1,"us":{"credits":1.0,"pages":1,"reported":{}},"t":[[40,0,"queued",6],'
    b'[2040,1,"running",4],[4040,3,"running",5,"10% parsing"],[6040,3,0,4,"20% processing"],'
    b'[8040,3,0,4,"30% preprocessing"],[10040,3,0,4,"40% ocr"],[12040,3,0,4,"50% ocr"],'
    b'[14040,3,0,4,"60% extraction"],[16040,3,0,4,"70% extraction"],[,1,0,5],[,4,"succeeded",5],'
    b'[,4,"done",5]],"td":1,"e":["evt_","evt_0'
)


def compacted(plain: bytes) -> bytes:
    """``plain`` (a record as ``Run.to_json`` writes it: its fields in order, the version among the first)
    in the compact form; as it is when nothing follows the version, the rest is over ``MAX_REST`` or the
    compact form would not be shorter."""
    start = plain.index(_VERSION) + len(_VERSION)
    end = start
    while plain[end : end + 1].isdigit():
        end += 1
    rest = plain[end + 1 :]  # past the version's ","
    if plain[end : end + 1] != b"," or len(rest) > MAX_REST:
        return plain
    deflate = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zdict=_DICTIONARY)
    packed = zlib.crc32(rest).to_bytes(4, "big") + deflate.compress(rest) + deflate.flush()
    written = plain[:end] + MARK + base64.b64encode(packed) + b'"}'
    return written if len(written) < len(plain) else plain  # a tenant's random text packs longer


def expanded(data: bytes) -> bytes:
    """The plain record of ``data``: ``data`` itself when it is not compact (any form a reader knows, and a
    compact one cut short, which no JSON reader takes), else its rest inflated after its head. Raises
    ValueError for a compact record damaged."""
    # Every claim reads its runs' records: one ending as no compact record does (a run in flight ends
    # with its events' ids or a number) is given back without a search. One cut short is not JSON.
    if not data.endswith(b'"}'):
        return data
    start = data.find(_VERSION)
    if start < 0:
        return data
    end = start + len(_VERSION)
    while data[end : end + 1].isdigit():
        end += 1
    if not data.startswith(MARK, end):
        return data
    try:
        packed = base64.b64decode(data[end + len(MARK) : -2], validate=True)
        inflate = zlib.decompressobj(_WBITS, zdict=_DICTIONARY)
        rest = inflate.decompress(packed[4:], MAX_REST + 1)
    except (binascii.Error, zlib.error) as exc:
        raise ValueError(f"a compact run record does not inflate: {exc}") from None
    if not inflate.eof or inflate.unused_data or len(rest) > MAX_REST:
        raise ValueError("a compact run record is cut short or longer than one can be")
    if zlib.crc32(rest).to_bytes(4, "big") != packed[:4]:
        raise ValueError("a compact run record fails its check: damaged")
    return data[:end] + b"," + rest
