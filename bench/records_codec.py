"""What a run record costs to decode, encode and change: the pydantic model of ``service/records.py``
beside the same record as a frozen, slotted dataclass and as the plain dict of before.

    .venv/bin/python bench/records_codec.py

Prints microseconds per operation on a run in flight (running, with progress and adapter state).
"""

from __future__ import annotations

import dataclasses
import json
import timeit
from typing import Any

from service.lifecycle import new_run
from service.records import Run, replace

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
    return replace(
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
    )


def _dataclass_twin() -> Any:
    """The same fields as a frozen, slotted dataclass, with the codec a dataclass would need."""
    specs: list[Any] = []
    for name, info in Run.model_fields.items():
        if info.is_required():
            specs.append((name, Any))
        else:
            default = info.get_default(call_default_factory=True)
            factory = (lambda d=default: type(d)()) if isinstance(default, dict | list) else None
            specs.append(
                (
                    name,
                    Any,
                    dataclasses.field(default_factory=factory)
                    if factory
                    else dataclasses.field(default=default),
                )
            )
    cls = dataclasses.make_dataclass("RunDC", specs, frozen=True, slots=True)
    defaults = [
        (f.name, f.default if f.default is not dataclasses.MISSING else None) for f in dataclasses.fields(cls)
    ]

    def encode(rec: Any) -> str:
        return json.dumps(
            {n: getattr(rec, n) for n, d in defaults if getattr(rec, n) != d}, separators=(",", ":")
        )

    def decode(raw: str) -> Any:
        return cls(**json.loads(raw))

    return encode, decode


def _us(fn: Any) -> float:
    return min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6


def main() -> None:
    run = _sample()
    raw = run.to_json()
    print(f"stored run: {len(raw)} bytes")
    print(
        f"pydantic (records.Run)  decode {_us(lambda: Run.from_json(raw)):5.1f} us  "
        f"encode {_us(run.to_json):5.1f} us  change {_us(lambda: replace(run, version=5, polls=4)):5.1f} us"
    )
    encode, decode = _dataclass_twin()
    rec = decode(raw)
    print(
        f"frozen slotted dataclass decode {_us(lambda: decode(raw)):5.1f} us  "
        f"encode {_us(lambda: encode(rec)):5.1f} us  "
        f"change {_us(lambda: dataclasses.replace(rec, version=5, polls=4)):5.1f} us"
    )
    as_dict = json.loads(raw)
    print(
        f"plain dict (before)      decode {_us(lambda: json.loads(raw)):5.1f} us  "
        f"encode {_us(lambda: json.dumps(as_dict, separators=(',', ':'))):5.1f} us  "
        f"change {_us(lambda: {**as_dict, 'version': 5, 'polls': 4}):5.1f} us"
    )


if __name__ == "__main__":
    main()
