"""What a run record costs to decode, encode and change: the msgspec struct of ``service/core/records.py``
beside the same record as the pydantic model it was (issue 16's sixth round) and as the plain dict of
before that.

    .venv/bin/python -m bench.records_codec

Prints microseconds per operation on a run in flight (running, with progress, adapter state and a full
vendor trail), and checks that the struct and the pydantic twin store the same bytes; then the same run
finished, whose record is stored compact (``service/core/compact.py``), against its plain form.
"""

from __future__ import annotations

import json
import timeit
from typing import Any

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

from service.core import compact, trail
from service.core.lifecycle import new_run
from service.core.records import Run, replace

N = 20_000


def _sample() -> Run:
    run = new_run(
        run_id="run_01J0000000000000000000000",
        client="alice",
        vendor="nutrient",
        operation="extract",
        document={"filename": "invoice.pdf", "media_type": "application/pdf"},
        options={"language": "en"},
        metadata={"order": "A-1"},
        subscription_ids=[],
        zero_retention=False,
        now_ms=1_800_000_000_000,
    )
    run = replace(
        run,
        status="running",
        version=4,
        vendor_run_id="job_123456",
        vendor_status="processing",
        progress={"percent": 40, "phase": "ocr", "message": None},
        polls=3,
        state={"row": "abc"},
        delay_s=1.5,
        document=None,
        event_ids=["evt_01J0000000000000000000000"],
    )
    for i in range(12):  # a full trail: trail.HEAD + trail.TAIL entries
        at = run.created_at + 30_000 * (i + 1)
        run = replace(run, **trail.appended(run, "poll", at_ms=at, vendor_status="processing", latency_ms=40))
    return run


def _pydantic_twin() -> type[BaseModel]:
    """The same fields as a frozen pydantic model, as ``records.Run`` was before the sixth round (under
    the stored names the struct writes since)."""
    fields: dict[str, Any] = {}
    for f in msgspec.structs.fields(Run):
        if f.required:
            fields[f.name] = (f.type, Field(alias=f.encode_name))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields[f.name] = (f.type, Field(alias=f.encode_name, default_factory=f.default_factory))
        else:
            fields[f.name] = (f.type, Field(alias=f.encode_name, default=f.default))
    return create_model("RunPydantic", __config__=ConfigDict(frozen=True, extra="ignore"), **fields)


def _us(fn: Any) -> float:
    return min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6


def main() -> None:
    run = _sample()
    raw = run.to_json()
    print(f"stored run: {len(raw)} bytes")
    print(
        f"msgspec (records.Run)   decode {_us(lambda: Run.from_json(raw, run.id)):5.1f} us  "
        f"encode {_us(run.to_json):5.1f} us  change {_us(lambda: replace(run, version=5, polls=4)):5.1f} us"
    )
    # The pydantic twin and the dict stored the id too: compared on that form (the id, then the stored one).
    raw = msgspec.json.encode(run).decode()
    twin = _pydantic_twin()
    rec = twin.model_validate_json(raw)
    twin_raw = rec.model_dump_json(exclude_defaults=True, by_alias=True)
    assert twin_raw == raw, "the two codecs store different bytes"
    print(
        f"pydantic (before)       decode {_us(lambda: twin.model_validate_json(raw)):5.1f} us  "
        f"encode {_us(lambda: rec.model_dump_json(exclude_defaults=True, by_alias=True)):5.1f} us  "
        f"change {_us(lambda: rec.model_copy(update={'version': 5, 'polls': 4})):5.1f} us"
    )
    as_dict = json.loads(raw)
    print(
        f"plain dict (before that) decode {_us(lambda: json.loads(raw)):5.1f} us  "
        f"encode {_us(lambda: json.dumps(as_dict, separators=(',', ':'))):5.1f} us  "
        f"change {_us(lambda: {**as_dict, 'version': 5, 'polls': 4}):5.1f} us"
    )
    done = replace(run, status="succeeded", version=5, completed_at=run.updated_at, usage={"credits": 9.0})
    stored, plain = done.to_json(), msgspec.json.encode(done)
    assert compact.MARK in stored.encode() and Run.from_json(stored, done.id) == done
    print(f"finished run: {len(stored)} bytes compact, {len(plain) - len(_ID) - len(done.id)} plain")
    print(
        f"compact (finished)      decode {_us(lambda: Run.from_json(stored, done.id)):5.1f} us  "
        f"encode {_us(done.to_json):5.1f} us"
    )
    print(
        f"plain (finished)        decode {_us(lambda: Run.from_json(plain)):5.1f} us  "
        f"encode {_us(lambda: msgspec.json.encode(done)):5.1f} us"
    )


_ID = b'{"id":"",'


if __name__ == "__main__":
    main()
