"""pydantic v2 against msgspec on our request shapes (issue 13): which library declares the API models.

Validates a ``RunRequest`` JSON body (a good one, and a bad one with three bad fields) and dumps a run
response, each many times in this process; prints microseconds per call and how many errors each library
reports for the bad body. msgspec is optional (``pip install msgspec``); it is not a dependency.

    .venv/bin/python -m bench.models
"""

import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic

GOOD = json.dumps(
    {
        "vendor": "nutrient",
        "operation": "extract",
        "document": {"url": "https://example.com/invoice.pdf", "filename": "invoice.pdf"},
        "options": {"instructions": {"mode": "agentic"}},
        "metadata": {"order_id": "A-1001", "team": "billing"},
        "zero_retention": False,
    }
).encode()
BAD = json.dumps(
    {"vendor": "nutrient", "operation": "nope", "document": {"url": 5}, "metadata": {"n": 1}}
).encode()
RUN = {
    "id": "run_01J9Z3K8V2Q4M6N8P0R2S4T6V8",
    "status": "running",
    "vendor": "nutrient",
    "operation": "extract",
    "vendor_run_id": "7KPSBB",
    "vendor_status": "running",
    "progress": {"percent": 40.0, "phase": "ocr", "message": None},
    "metadata": {"order_id": "A-1001"},
    "zero_retention": False,
    "created_at": "2026-01-01T00:00:00.000Z",
    "updated_at": "2026-01-01T00:00:01.000Z",
    "completed_at": None,
    "polls": 3,
    "error": None,
}


PValue = Annotated[str, pydantic.Field(max_length=500)]


class PDocument(pydantic.BaseModel, extra="forbid"):
    url: Annotated[str, pydantic.Field(max_length=2048, pattern=r"^https?://\S+$")]
    filename: Annotated[str, pydantic.Field(min_length=1, max_length=255)] = "document"


class PRequest(pydantic.BaseModel, extra="forbid", strict=True):
    vendor: Literal["nutrient"]
    operation: Literal["parse", "extract", "classify", "split"] = "extract"
    document: PDocument
    options: dict[str, Any] = {}
    metadata: Annotated[dict[str, PValue], pydantic.Field(max_length=50)]
    zero_retention: bool = False


class PProgress(pydantic.BaseModel):
    percent: float | None
    phase: str | None
    message: str | None


class PRun(pydantic.BaseModel):
    id: str
    status: str
    vendor: str
    operation: str
    vendor_run_id: str | None
    vendor_status: str | None
    progress: PProgress | None
    metadata: dict[str, str]
    zero_retention: bool
    created_at: str
    updated_at: str
    completed_at: str | None
    polls: int
    error: dict[str, Any] | None


def timed(fn: Callable[[], Any], n: int = 20_000) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def pydantic_figures() -> dict[str, Any]:
    def bad() -> int:
        try:
            PRequest.model_validate_json(BAD)
        except pydantic.ValidationError as exc:
            return exc.error_count()
        return 0

    run = PRun.model_validate(RUN)
    return {
        "good_us": timed(lambda: PRequest.model_validate_json(GOOD)),
        "bad_us": timed(bad),
        "dump_us": timed(run.model_dump_json),
        "errors_for_bad": bad(),
    }


def msgspec_figures() -> dict[str, Any] | None:
    try:
        import msgspec
    except ImportError:
        return None

    MValue = Annotated[str, msgspec.Meta(max_length=500)]

    class MDocument(msgspec.Struct, forbid_unknown_fields=True):
        url: Annotated[str, msgspec.Meta(max_length=2048, pattern=r"^https?://\S+$")]
        filename: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] = "document"

    class MRequest(msgspec.Struct, forbid_unknown_fields=True):
        vendor: Literal["nutrient"]
        document: MDocument
        metadata: Annotated[dict[str, MValue], msgspec.Meta(max_length=50)]
        operation: Literal["parse", "extract", "classify", "split"] = "extract"
        options: dict[str, Any] = {}
        zero_retention: bool = False

    decoder = msgspec.json.Decoder(MRequest)
    encoder = msgspec.json.Encoder()

    def bad() -> int:
        try:
            decoder.decode(BAD)
        except msgspec.ValidationError:
            return 1  # one message: msgspec stops at the first bad field
        return 0

    return {
        "good_us": timed(lambda: decoder.decode(GOOD)),
        "bad_us": timed(bad),
        "dump_us": timed(lambda: encoder.encode(RUN)),
        "errors_for_bad": bad(),
    }


def main() -> None:
    rows = {"pydantic " + pydantic.VERSION: pydantic_figures(), "msgspec": msgspec_figures()}
    print(f"{'library':<18}{'good µs':>10}{'bad µs':>10}{'dump µs':>10}{'errors[] for 3 bad':>20}")
    for name, row in rows.items():
        if row is None:
            print(f"{name:<18}  not installed")
            continue
        print(
            f"{name:<18}{row['good_us']:>10.2f}{row['bad_us']:>10.2f}{row['dump_us']:>10.2f}"
            f"{row['errors_for_bad']:>20}"
        )


if __name__ == "__main__":
    main()
