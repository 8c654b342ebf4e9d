"""Knobs of the vendor simulator.

Every knob is a field of :class:`SimulatorConfig`, read from an environment variable by
:meth:`SimulatorConfig.from_env` and changeable at run time through ``PATCH /_sim/config`` (JSON keyed by
field name). A bad value raises :class:`ValueError` naming the variable (or the field, for a PATCH).

Each line: variable -> field (default): meaning.

- ``HOOKBRIDGE_SIM_SEED`` -> ``seed`` (0): seeds every RNG (faults, run durations, ids), so a run of
  requests is repeatable.
- ``HOOKBRIDGE_SIM_LATENCY_MS`` -> ``latency_ms`` ("0,0"): extra delay of every vendor request, ms "min,max".
- ``HOOKBRIDGE_SIM_DURATION_S`` -> ``duration_s`` ("1,3"): processing time of a run, s "min,max"; about
  the first 20% of it is spent queued.
- ``HOOKBRIDGE_SIM_RATE_5XX`` -> ``rate_5xx`` (0): share of vendor requests answered 500, 502 or 503.
- ``HOOKBRIDGE_SIM_RATE_DROP`` -> ``rate_drop`` (0): share of vendor requests whose connection is closed
  without an answer.
- ``HOOKBRIDGE_SIM_VENDORS_FAULTY`` -> ``vendors_faulty`` ("all"): comma list of the vendors the two rates
  above apply to; "none" for none.
- ``HOOKBRIDGE_SIM_NUTRIENT_RPS`` -> ``nutrient_rps`` (0 = no limit): tokens a second of the token bucket
  that every Nutrient request takes one token from, one bucket per API key ("polling and submission
  requests share a rate limit", S003); a request that finds it empty is answered 429. The buckets are the
  only source of 429s, and send no ``Retry-After``: no vendor documents one. No vendor publishes its
  numbers either, so the limits are off by default; tests set them to make a storm. Changing any
  ``*_rps`` or ``*_burst`` refills every bucket.
- ``HOOKBRIDGE_SIM_NUTRIENT_BURST`` -> ``nutrient_burst`` (10): the bucket's size.
- ``HOOKBRIDGE_SIM_CLOUDSQUID_RPS`` -> ``cloudsquid_rps`` (0): the same for Cloudsquid, whose rate limit is
  undocumented (a GUESS).
- ``HOOKBRIDGE_SIM_CLOUDSQUID_BURST`` -> ``cloudsquid_burst`` (10).
- ``HOOKBRIDGE_SIM_UPTIQ_RPS`` -> ``uptiq_rps`` (0): the same for Uptiq, whose rate limit is undocumented
  (a GUESS).
- ``HOOKBRIDGE_SIM_UPTIQ_BURST`` -> ``uptiq_burst`` (10).
- ``HOOKBRIDGE_SIM_CLOUDSQUID_LEGACY`` -> ``cloudsquid_legacy_shape`` (false): Cloudsquid polls answer the
  older ``{status, result}`` shape with the 3-value status enum.
- ``HOOKBRIDGE_SIM_UPTIQ_EARLY_404_S`` -> ``uptiq_early_404_s`` (1): for this many seconds after its submit
  (on the simulator's clock), an Uptiq extraction answers 404 ("wait a second and retry", S004).
- ``HOOKBRIDGE_SIM_UPTIQ_STUCK`` -> ``uptiq_stuck`` (false): Uptiq extractions submitted while it is on
  never leave ``Processing``.
- ``HOOKBRIDGE_SIM_NUTRIENT_CREDITS`` -> ``nutrient_credits`` (unset = unlimited): Nutrient credit balance;
  once finished runs have spent it, submits answer 402.
- ``HOOKBRIDGE_SIM_NUTRIENT_MAX_PROCESSING_S`` -> ``nutrient_max_processing_s`` (900): Nutrient's
  processing limit; a run still running past it ends ``error``.
- ``HOOKBRIDGE_SIM_NUTRIENT_RETENTION_S`` -> ``nutrient_retention_s`` (86400): a finished Nutrient run
  answers 410 ``run_expired`` this long after it finished.
- ``HOOKBRIDGE_SIM_NUTRIENT_RATE_ENQUEUE_FAIL`` -> ``nutrient_rate_enqueue_fail`` (0): share of Nutrient
  submits answered 503 ``run_enqueue_failed`` (nothing stored).
- ``HOOKBRIDGE_SIM_NUTRIENT_API_KEY`` -> ``nutrient_api_key`` ("sim-nutrient-key"): the Bearer token
  expected.
- ``HOOKBRIDGE_SIM_CLOUDSQUID_API_KEY`` -> ``cloudsquid_api_key`` ("sim-cloudsquid-key"): the
  ``X-API-Key`` expected.
- ``HOOKBRIDGE_SIM_UPTIQ_API_KEY`` -> ``uptiq_api_key`` ("sim-uptiq-key"): the ``X-Api-Key`` expected.

AWS Textract, Google Document AI and their storage (service/simulator/textract.py, google_docai.py,
storage.py, oauth.py):

- ``HOOKBRIDGE_SIM_TEXTRACT_RPS`` -> ``textract_rps`` (0): Textract's token bucket, one per access key id;
  an empty one answers 400 ``ProvisionedThroughputExceededException`` (Textract never answers 429).
- ``HOOKBRIDGE_SIM_TEXTRACT_BURST`` -> ``textract_burst`` (10).
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_RPS`` -> ``google_docai_rps`` (0): Document AI's, one per bearer token;
  an empty one answers 429 ``RESOURCE_EXHAUSTED``.
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_BURST`` -> ``google_docai_burst`` (10).
- ``HOOKBRIDGE_SIM_S3_PORT`` -> ``s3_port`` (0 = a free port): the loopback port of the S3 emulator
  (moto); ``GET /_sim/storage`` tells where it and the GCS one are.
- ``HOOKBRIDGE_SIM_GCS_PORT`` -> ``gcs_port`` (0): the GCS emulator's (gcp-storage-emulator).
- ``HOOKBRIDGE_SIM_TEXTRACT_REGION`` -> ``textract_region`` ("us-east-1"): the region a SigV4 scope must
  name.
- ``HOOKBRIDGE_SIM_TEXTRACT_ACCESS_KEY_ID`` -> ``textract_access_key_id`` ("AKIASIMULATOR0000001") and
  ``HOOKBRIDGE_SIM_TEXTRACT_SECRET_ACCESS_KEY`` -> ``textract_secret_access_key``: the dummy credentials
  whose signatures Textract accepts.
- ``HOOKBRIDGE_SIM_TEXTRACT_SIGV4`` -> ``textract_sigv4`` ("verify"): "verify" recomputes the signature
  with botocore's signer; "form" checks only the header's form, key, scope and date.
- ``HOOKBRIDGE_SIM_TEXTRACT_JOB_LIFETIME_S`` -> ``textract_job_lifetime_s`` (604800): a JobId and its
  ClientRequestToken live this long; then Get* answers 400 ``InvalidJobIdException``.
- ``HOOKBRIDGE_SIM_TEXTRACT_MAX_CONCURRENT_JOBS`` -> ``textract_max_concurrent_jobs`` (0 = no cap):
  running jobs per Start operation before a Start answers 400 ``LimitExceededException``.
- ``HOOKBRIDGE_SIM_TEXTRACT_PAGE_BLOCKS`` -> ``textract_page_blocks`` (1000): most Blocks in one Get
  page, whatever ``MaxResults`` says.
- ``HOOKBRIDGE_SIM_TEXTRACT_RATE_THROUGHPUT`` -> ``textract_rate_throughput`` (0) and
  ``HOOKBRIDGE_SIM_TEXTRACT_RATE_THROTTLING`` -> ``textract_rate_throttling`` (0): share of Textract
  requests answered 400 ``ProvisionedThroughputExceededException`` / 500 ``ThrottlingException``.
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_PROJECT_ID`` -> ``google_docai_project_id`` ("sim-project") and
  ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_PROJECT_NUMBER`` -> ``google_docai_project_number`` ("123456789012"):
  the one project served (by id or number; operation names use the number).
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_LOCATION`` -> ``google_docai_location`` ("us").
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_MAX_CONCURRENT`` -> ``google_docai_max_concurrent`` (10; 0 = no cap):
  unfinished batch operations per project.
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_OVER_QUOTA`` -> ``google_docai_over_quota`` ("429"): past the cap a
  batchProcess answers 429 ``RESOURCE_EXHAUSTED``; "wait" lets the new operation sit in ``WAITING``.
- ``HOOKBRIDGE_SIM_GOOGLE_DOCAI_RETENTION_S`` -> ``google_docai_retention_s`` (2592000): a finished
  operation answers 404 this long after it ended.
- ``HOOKBRIDGE_SIM_GOOGLE_SA_KEY_FILE`` -> ``google_sa_key_file`` (unset): a service-account key file
  whose key the token endpoint and Document AI trust (``POST /_sim/google/service-account`` makes more).
- ``HOOKBRIDGE_SIM_STORAGE_BUCKETS`` -> ``storage_buckets`` (unset): comma-separated bucket names made in
  both the S3 and the GCS emulator when they start (the demo's staging buckets).
Silent-document readings: where a document says nothing, a real vendor may do any of these; the simulator
plays the one chosen, so that no adapter rests on a guess only the simulator shares.

- ``HOOKBRIDGE_SIM_UPTIQ_MULTI_SHAPE`` -> ``uptiq_multi_shape`` ("object"): the 202 of a multi-extraction
  (``documentTypes``), which S004 does not show: ``object`` ``{"data": {"_id"}}`` as for one type, ``list``
  ``{"data": [{"_id"}]}`` one record per type, ``ids`` ``{"data": {"_ids": [...]}}``.
- ``HOOKBRIDGE_SIM_NUTRIENT_DELETE`` -> ``nutrient_delete`` ("delete"): the delete route, an inference:
  ``delete`` answers ``DELETE /extraction/runs/{id}`` 204; ``404`` and ``405`` play a vendor without it.
- ``HOOKBRIDGE_SIM_NUTRIENT_DOWNLOAD_HOST`` -> ``nutrient_download_host`` ("own"): ``other`` gives a split
  zip's ``output.downloadUrl`` on another host (a presigned storage URL, the simulator under its other
  loopback name), which S003 does not rule out; it refuses a request that carries an Authorization.
- ``HOOKBRIDGE_SIM_UPTIQ_BODY_FIELDS`` -> ``uptiq_body_fields`` ("camel"): the ``/extract`` body's document
  fields, which S004 does not publish: ``camel`` ``fileUrl``/``fileBase64``/``fileName``, ``snake``
  ``file_url``/``file_base64``/``file_name``; a body without them is refused 400, naming them.
- ``HOOKBRIDGE_SIM_NUTRIENT_JSON_INSTRUCTIONS`` -> ``nutrient_json_instructions`` ("top"): where a JSON
  (URL) submit's instruction fields go, shown by NU-parse for parse only: ``top`` beside ``url`` for every
  operation; ``nested`` for every operation but parse, under ``instructions`` (top-level ones refused 400).
- ``HOOKBRIDGE_SIM_RATE_NO_STATUS`` -> ``rate_no_status`` (0): share of polls (every vendor) answered 200
  without the run's ``status`` field: no document lists it as always present.
- ``HOOKBRIDGE_SIM_AZURE_DI_API_KEY`` -> ``azure_di_api_key`` ("sim-azure-di-key"): the
  ``Ocp-Apim-Subscription-Key`` expected by the Azure AI Document Intelligence simulator (``azure_di.py``).
- ``HOOKBRIDGE_SIM_AZURE_DI_BEARER_TOKEN`` -> ``azure_di_bearer_token`` ("sim-azure-di-token"): the Entra ID
  bearer token it accepts instead of the key.
- ``HOOKBRIDGE_SIM_AZURE_DI_RPS`` -> ``azure_di_rps`` (0): the shared bucket of every Azure request, like
  the other vendors'.
- ``HOOKBRIDGE_SIM_AZURE_DI_BURST`` -> ``azure_di_burst`` (10).
- ``HOOKBRIDGE_SIM_AZURE_DI_ANALYZE_TPS`` -> ``azure_di_analyze_tps`` (15): submits a second per key, the
  documented S0 default; 0 = no limit.
- ``HOOKBRIDGE_SIM_AZURE_DI_GET_TPS`` -> ``azure_di_get_tps`` (50): reads and deletes a second per key.
- ``HOOKBRIDGE_SIM_AZURE_DI_MIN_POLL_S`` -> ``azure_di_min_poll_s`` (2): a poll of one operation sooner
  than this after its last answered poll is 429.
- ``HOOKBRIDGE_SIM_AZURE_DI_RETRY_AFTER`` -> ``azure_di_retry_after`` ("random"): ``always``, ``never`` or
  ``random`` (per operation, seeded): whether the 202 and unfinished polls carry ``Retry-After``.
- ``HOOKBRIDGE_SIM_AZURE_DI_RETRY_AFTER_S`` -> ``azure_di_retry_after_s`` (2): its value.
- ``HOOKBRIDGE_SIM_AZURE_DI_429_RETRY_AFTER`` -> ``azure_di_429_retry_after`` ("random"): the same for 429s.
- ``HOOKBRIDGE_SIM_AZURE_DI_RUNNING_POLLS`` -> ``azure_di_running_polls`` (0): polls a finished operation
  still answers ``running``.
- ``HOOKBRIDGE_SIM_AZURE_DI_UNKNOWN_STATUS`` -> ``azure_di_unknown_status`` (""): when set, the status an
  operation reports instead of ``running`` (a value the adapter does not know).
- ``HOOKBRIDGE_SIM_AZURE_DI_RETENTION_S`` -> ``azure_di_retention_s`` (86400): results answer 404 this long
  after their submit.
- ``HOOKBRIDGE_SIM_AZURE_DI_RESULT_PAD_BYTES`` -> ``azure_di_result_pad_bytes`` (0): a succeeded operation's
  ``analyzeResult`` grows by about this many bytes (``paragraphs`` of filler): a large inline result
  ("max OCR JSON response 500 MB", §1.5) without a large document.
- ``HOOKBRIDGE_SIM_AZURE_DI_DELETE_UNFINISHED`` -> ``azure_di_delete_unfinished`` ("allow"): a DELETE of an
  operation still ``notStarted`` or ``running``, which the spec's "Mark the result ... for deletion" does not
  rule on: ``allow`` (204) or ``409`` (``Conflict``, the error table's code for a state clash).
- ``HOOKBRIDGE_SIM_LLAMAPARSE_API_KEY`` -> ``llamaparse_api_key`` ("llx-sim-llamaparse-key"): the Bearer key
  the LlamaParse simulator (``llamaparse.py``) expects.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_RPS`` -> ``llamaparse_rps`` (0): the shared bucket of every LlamaParse request.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_BURST`` -> ``llamaparse_burst`` (10).
- ``HOOKBRIDGE_SIM_LLAMAPARSE_WINDOW_LIMIT`` -> ``llamaparse_window_limit`` (50): submits allowed per window
  and key; 0 = no limit.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_WINDOW_S`` -> ``llamaparse_window_s`` (10): the window.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_429_RETRY_AFTER`` -> ``llamaparse_429_retry_after`` ("random"): ``always``,
  ``never`` or ``random``.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_ID_SHAPE`` -> ``llamaparse_id_shape`` ("flat"): the create answer's shape,
  ``flat``, ``nested`` (``{"job": ...}``), ``both`` or ``random``.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_CREDITS`` -> ``llamaparse_credits`` (unset = unlimited): once spent, 402.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_FAILED_PAGES`` -> ``llamaparse_failed_pages`` (false): completed jobs carry a
  failed last page.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_INLINE_MAX_BYTES`` -> ``llamaparse_inline_max_bytes`` (0 = no cap): larger
  inline results are left out, only the presigned URL carries them.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_PRESIGN_TTL_S`` -> ``llamaparse_presign_ttl_s`` (3600): presigned URLs' life.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_STORAGE_BASE_URL`` -> ``llamaparse_storage_base_url`` (""): the presigned
  URLs' origin; empty = the request's, with ``127.0.0.1`` and ``localhost`` swapped.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_REFUSAL_STATUS`` -> ``llamaparse_refusal_status`` (400): the status of a cancel
  of a finished job and of a delete of an unfinished one (undocumented).
- ``HOOKBRIDGE_SIM_LLAMAPARSE_RETRY_AFTER`` -> ``llamaparse_retry_after`` ("never"): ``always``, ``never`` or
  ``random`` (per job, seeded): whether the create answer and the polls of an unfinished job carry
  ``Retry-After`` (undocumented for polls).
- ``HOOKBRIDGE_SIM_LLAMAPARSE_RETRY_AFTER_S`` -> ``llamaparse_retry_after_s`` (1): its value.
- ``HOOKBRIDGE_SIM_LLAMAPARSE_DELETE`` -> ``llamaparse_delete`` ("delete"): the delete route, not in the
  document: ``delete`` (the SDK 2.19's), ``404`` or ``405`` (an API without it).

Booleans accept 1/0, true/false, yes/no, on/off. Rates are fractions in [0, 1]; the two fault rates
together must not exceed 1, since one draw per request picks at most one fault.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VENDORS: tuple[str, ...] = (
    "nutrient",
    "cloudsquid",
    "uptiq",
    "azure_di",
    "llamaparse",
    "textract",
    "google_docai",
)
ENV_PREFIX = "HOOKBRIDGE_SIM_"


@dataclass(frozen=True)
class SimulatorConfig:
    seed: int = 0
    latency_ms: tuple[float, float] = (0.0, 0.0)
    duration_s: tuple[float, float] = (1.0, 3.0)
    rate_5xx: float = 0.0
    rate_drop: float = 0.0
    vendors_faulty: frozenset[str] = field(default_factory=lambda: frozenset(VENDORS))
    cloudsquid_legacy_shape: bool = False
    uptiq_early_404_s: float = 1.0
    uptiq_stuck: bool = False
    nutrient_credits: float | None = None
    nutrient_max_processing_s: float = 900.0
    nutrient_retention_s: float = 86400.0
    nutrient_rate_enqueue_fail: float = 0.0
    nutrient_api_key: str = "sim-nutrient-key"
    cloudsquid_api_key: str = "sim-cloudsquid-key"
    uptiq_api_key: str = "sim-uptiq-key"
    nutrient_rps: float = 0.0
    nutrient_burst: int = 10
    cloudsquid_rps: float = 0.0
    cloudsquid_burst: int = 10
    uptiq_rps: float = 0.0
    uptiq_burst: int = 10
    # AWS Textract and Google Document AI, and their storage (textract.py, google_docai.py, storage.py).
    textract_rps: float = 0.0
    textract_burst: int = 10
    google_docai_rps: float = 0.0
    google_docai_burst: int = 10
    s3_port: int = 0
    gcs_port: int = 0
    textract_region: str = "us-east-1"
    textract_access_key_id: str = "AKIASIMULATOR0000001"
    textract_secret_access_key: str = "sim-textract-secret-access-key"
    textract_sigv4: str = "verify"
    textract_job_lifetime_s: float = 7 * 86400.0
    textract_max_concurrent_jobs: int = 0
    textract_page_blocks: int = 1000
    textract_rate_throughput: float = 0.0
    textract_rate_throttling: float = 0.0
    google_docai_project_id: str = "sim-project"
    google_docai_project_number: str = "123456789012"
    google_docai_location: str = "us"
    google_docai_max_concurrent: int = 10
    google_docai_over_quota: str = "429"
    google_docai_retention_s: float = 30 * 86400.0
    google_sa_key_file: str = ""
    storage_buckets: str = ""
    uptiq_multi_shape: str = "object"
    nutrient_delete: str = "delete"
    nutrient_download_host: str = "own"
    rate_no_status: float = 0.0
    azure_di_api_key: str = "sim-azure-di-key"
    azure_di_bearer_token: str = "sim-azure-di-token"
    azure_di_rps: float = 0.0
    azure_di_burst: int = 10
    azure_di_analyze_tps: float = 15.0
    azure_di_get_tps: float = 50.0
    azure_di_min_poll_s: float = 2.0
    azure_di_retry_after: str = "random"
    azure_di_retry_after_s: int = 2
    azure_di_429_retry_after: str = "random"
    azure_di_running_polls: int = 0
    azure_di_unknown_status: str = ""
    azure_di_retention_s: float = 86400.0
    azure_di_result_pad_bytes: int = 0
    azure_di_delete_unfinished: str = "allow"
    llamaparse_api_key: str = "llx-sim-llamaparse-key"
    llamaparse_rps: float = 0.0
    llamaparse_burst: int = 10
    llamaparse_window_limit: int = 50
    llamaparse_window_s: float = 10.0
    llamaparse_429_retry_after: str = "random"
    llamaparse_id_shape: str = "flat"
    llamaparse_credits: float | None = None
    llamaparse_failed_pages: bool = False
    llamaparse_inline_max_bytes: int = 0
    llamaparse_presign_ttl_s: float = 3600.0
    llamaparse_storage_base_url: str = ""
    llamaparse_refusal_status: int = 400
    llamaparse_retry_after: str = "never"
    llamaparse_retry_after_s: int = 1
    llamaparse_delete: str = "delete"
    uptiq_body_fields: str = "camel"
    nutrient_json_instructions: str = "top"

    def __post_init__(self) -> None:
        _check_cloud(self)
        _check_range("latency_ms", self.latency_ms)
        _check_range("duration_s", self.duration_s)
        for name, allowed in _READINGS.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("rate_5xx", "rate_drop", "nutrient_rate_enqueue_fail", "rate_no_status"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: must be between 0 and 1, got {value}")
        if self.rate_5xx + self.rate_drop > 1.0 + 1e-9:
            raise ValueError("rate_5xx + rate_drop: must not exceed 1")
        unknown = set(self.vendors_faulty) - set(VENDORS)
        if unknown:
            raise ValueError(f"vendors_faulty: unknown vendor(s) {sorted(unknown)}")
        for vendor in VENDORS:
            rps, burst = getattr(self, f"{vendor}_rps"), getattr(self, f"{vendor}_burst")
            if not rps >= 0 or math.isinf(rps):
                raise ValueError(f"{vendor}_rps: must be a finite number >= 0 (0 = no limit), got {rps}")
            if burst < 1:
                raise ValueError(f"{vendor}_burst: must be >= 1, got {burst}")
        if self.nutrient_credits is not None and self.nutrient_credits < 0:
            raise ValueError(f"nutrient_credits: must be >= 0, got {self.nutrient_credits}")
        for name in ("nutrient_max_processing_s", "nutrient_retention_s", "uptiq_early_404_s"):
            value = getattr(self, name)
            if not value >= 0 or math.isinf(value):
                raise ValueError(f"{name}: must be a finite number >= 0, got {value}")
        for name in ("nutrient_api_key", "cloudsquid_api_key", "uptiq_api_key"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must not be empty")
        _check_new_vendors(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SimulatorConfig:
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            var = env_var(f.name)
            raw = environ.get(var)
            if raw is None:
                continue
            try:
                values[f.name] = _PARSERS[f.name](raw.strip())
            except ValueError as exc:
                raise ValueError(f"{var}: {exc}") from None
        try:
            return cls(**values)
        except ValueError as exc:
            # Cross-field checks run in __post_init__ and name a field; name its variable instead.
            name, _, rest = str(exc).partition(":")
            raise ValueError(f"{env_var(name) if name in _PARSERS else ENV_PREFIX + '*'}:{rest}") from None

    def patched(self, changes: Mapping[str, Any]) -> SimulatorConfig:
        """A copy with ``changes`` (JSON values keyed by field name) applied."""
        known = {f.name for f in dataclasses.fields(self)}
        values: dict[str, Any] = {}
        for name, raw in changes.items():
            if name not in known:
                raise ValueError(f"{name}: unknown knob")
            try:
                values[name] = _from_json(name, raw)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{name}: {exc}") from None
        return dataclasses.replace(self, **values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, frozenset):
                value = sorted(value)
            out[f.name] = value
        return out


_MODES = ("always", "never", "random")
_ID_SHAPES = ("flat", "nested", "both", "random")
_NEW_INTS = frozenset(
    {
        "azure_di_retry_after_s",
        "azure_di_running_polls",
        "azure_di_result_pad_bytes",
        "llamaparse_window_limit",
        "llamaparse_inline_max_bytes",
        "llamaparse_retry_after_s",
    }
)
_NEW_STRS = frozenset(
    {
        "azure_di_api_key",
        "azure_di_bearer_token",
        "azure_di_retry_after",
        "azure_di_429_retry_after",
        "azure_di_unknown_status",
        "azure_di_delete_unfinished",
        "llamaparse_api_key",
        "llamaparse_429_retry_after",
        "llamaparse_retry_after",
        "llamaparse_delete",
        "llamaparse_id_shape",
        "llamaparse_storage_base_url",
    }
)


def _check_new_vendors(config: SimulatorConfig) -> None:
    """Bounds of the Azure DI and LlamaParse knobs."""
    for name in ("azure_di_api_key", "azure_di_bearer_token", "llamaparse_api_key"):
        if not getattr(config, name):
            raise ValueError(f"{name}: must not be empty")
    for name in (
        "azure_di_retry_after",
        "azure_di_429_retry_after",
        "llamaparse_429_retry_after",
        "llamaparse_retry_after",
    ):
        if getattr(config, name) not in _MODES:
            raise ValueError(f"{name}: must be one of {', '.join(_MODES)}, got {getattr(config, name)!r}")
    if config.llamaparse_id_shape not in _ID_SHAPES:
        raise ValueError(f"llamaparse_id_shape: must be one of {', '.join(_ID_SHAPES)}")
    for name in (
        "azure_di_analyze_tps",
        "azure_di_get_tps",
        "azure_di_min_poll_s",
        "azure_di_retention_s",
        "llamaparse_window_s",
        "llamaparse_presign_ttl_s",
    ):
        value = getattr(config, name)
        if not value >= 0 or math.isinf(value):
            raise ValueError(f"{name}: must be a finite number >= 0, got {value}")
    for name in _NEW_INTS:
        if getattr(config, name) < 0:
            raise ValueError(f"{name}: must be >= 0, got {getattr(config, name)}")
    if config.llamaparse_window_limit > 0 and config.llamaparse_window_s <= 0:
        raise ValueError("llamaparse_window_s: must be > 0 when llamaparse_window_limit is set")
    if config.llamaparse_credits is not None and config.llamaparse_credits < 0:
        raise ValueError(f"llamaparse_credits: must be >= 0, got {config.llamaparse_credits}")
    if not 400 <= config.llamaparse_refusal_status <= 499:
        raise ValueError(
            f"llamaparse_refusal_status: must be a 4xx status, got {config.llamaparse_refusal_status}"
        )


# Env names that are not simply the upper-cased field name.
_ENV_SUFFIX = {"cloudsquid_legacy_shape": "CLOUDSQUID_LEGACY"}


def env_var(field_name: str) -> str:
    return ENV_PREFIX + _ENV_SUFFIX.get(field_name, field_name.upper())


def _check_range(name: str, value: tuple[float, float]) -> None:
    low, high = value
    if not (0.0 <= low <= high) or math.isinf(high):
        raise ValueError(f"{name}: need 0 <= min <= max (finite), got {low},{high}")


def _parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def _parse_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"not a number: {raw!r}") from None
    if math.isnan(value):
        raise ValueError("not a number: nan")
    return value


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"not an integer: {raw!r}") from None


def _parse_range(raw: str) -> tuple[float, float]:
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise ValueError(f"expected 'min,max', got {raw!r}")
    return (_parse_float(parts[0]), _parse_float(parts[1]))


def _parse_optional_float(raw: str) -> float | None:
    return None if raw.lower() in ("", "none", "unlimited") else _parse_float(raw)


def _parse_vendors(raw: str) -> frozenset[str]:
    if raw.lower() in ("", "none"):
        return frozenset()
    if raw.lower() == "all":
        return frozenset(VENDORS)
    names = frozenset(p.strip().lower() for p in raw.split(",") if p.strip())
    unknown = names - set(VENDORS)
    if unknown:
        raise ValueError(f"unknown vendor(s) {sorted(unknown)}; known: {', '.join(VENDORS)}")
    return names


def _parse_str(raw: str) -> str:
    return raw


_PARSERS: dict[str, Callable[[str], Any]] = {
    "seed": _parse_int,
    "latency_ms": _parse_range,
    "duration_s": _parse_range,
    "rate_5xx": _parse_float,
    "rate_drop": _parse_float,
    "vendors_faulty": _parse_vendors,
    "cloudsquid_legacy_shape": _parse_bool,
    "uptiq_early_404_s": _parse_float,
    "uptiq_stuck": _parse_bool,
    "nutrient_credits": _parse_optional_float,
    "nutrient_max_processing_s": _parse_float,
    "nutrient_retention_s": _parse_float,
    "nutrient_rate_enqueue_fail": _parse_float,
    "nutrient_api_key": _parse_str,
    "cloudsquid_api_key": _parse_str,
    "uptiq_api_key": _parse_str,
    "nutrient_rps": _parse_float,
    "nutrient_burst": _parse_int,
    "cloudsquid_rps": _parse_float,
    "cloudsquid_burst": _parse_int,
    "uptiq_rps": _parse_float,
    "uptiq_burst": _parse_int,
    "uptiq_multi_shape": _parse_str,
    "nutrient_delete": _parse_str,
    "nutrient_download_host": _parse_str,
    "rate_no_status": _parse_float,
    "azure_di_rps": _parse_float,
    "azure_di_burst": _parse_int,
    "azure_di_analyze_tps": _parse_float,
    "azure_di_get_tps": _parse_float,
    "azure_di_min_poll_s": _parse_float,
    "azure_di_retention_s": _parse_float,
    "llamaparse_rps": _parse_float,
    "llamaparse_burst": _parse_int,
    "llamaparse_window_s": _parse_float,
    "llamaparse_credits": _parse_optional_float,
    "llamaparse_failed_pages": _parse_bool,
    "llamaparse_presign_ttl_s": _parse_float,
    "llamaparse_refusal_status": _parse_int,
    **{name: _parse_int for name in _NEW_INTS},
    **{name: _parse_str for name in _NEW_STRS},
    "uptiq_body_fields": _parse_str,
    "nutrient_json_instructions": _parse_str,
}

# The readings each silent-document knob can play.
_READINGS: dict[str, tuple[str, ...]] = {
    "uptiq_multi_shape": ("object", "list", "ids"),
    "nutrient_delete": ("delete", "404", "405"),
    "llamaparse_delete": ("delete", "404", "405"),
    "nutrient_download_host": ("own", "other"),
    "uptiq_body_fields": ("camel", "snake"),
    "nutrient_json_instructions": ("top", "nested"),
    "azure_di_delete_unfinished": ("allow", "409"),
}


_PARSERS.update(
    {
        "textract_rps": _parse_float,
        "textract_burst": _parse_int,
        "google_docai_rps": _parse_float,
        "google_docai_burst": _parse_int,
        "s3_port": _parse_int,
        "gcs_port": _parse_int,
        "textract_region": _parse_str,
        "textract_access_key_id": _parse_str,
        "textract_secret_access_key": _parse_str,
        "textract_sigv4": _parse_str,
        "textract_job_lifetime_s": _parse_float,
        "textract_max_concurrent_jobs": _parse_int,
        "textract_page_blocks": _parse_int,
        "textract_rate_throughput": _parse_float,
        "textract_rate_throttling": _parse_float,
        "google_docai_project_id": _parse_str,
        "google_docai_project_number": _parse_str,
        "google_docai_location": _parse_str,
        "google_docai_max_concurrent": _parse_int,
        "google_docai_over_quota": _parse_str,
        "google_docai_retention_s": _parse_float,
        "google_sa_key_file": _parse_str,
        "storage_buckets": _parse_str,
    }
)
_CLOUD_INTS = frozenset(
    (
        "s3_port",
        "gcs_port",
        "textract_max_concurrent_jobs",
        "textract_page_blocks",
        "google_docai_max_concurrent",
    )
)


def _check_cloud(config: SimulatorConfig) -> None:
    """The Textract, Document AI and storage knobs' bounds."""
    for name in ("textract_rate_throughput", "textract_rate_throttling"):
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ValueError(f"{name}: must be between 0 and 1, got {getattr(config, name)}")
    if config.textract_rate_throughput + config.textract_rate_throttling > 1.0 + 1e-9:
        raise ValueError("textract_rate_throughput + textract_rate_throttling: must not exceed 1")
    for name in ("s3_port", "gcs_port"):
        if not 0 <= getattr(config, name) <= 65535:
            raise ValueError(f"{name}: must be a port (0 = a free one), got {getattr(config, name)}")
    if config.textract_sigv4 not in ("verify", "form"):
        raise ValueError(f"textract_sigv4: 'verify' or 'form', got {config.textract_sigv4!r}")
    if config.google_docai_over_quota not in ("429", "wait"):
        raise ValueError(f"google_docai_over_quota: '429' or 'wait', got {config.google_docai_over_quota!r}")
    if not 1 <= config.textract_page_blocks <= 1000:
        raise ValueError(f"textract_page_blocks: must be in 1..1000, got {config.textract_page_blocks}")
    for name in ("textract_max_concurrent_jobs", "google_docai_max_concurrent"):
        if getattr(config, name) < 0:
            raise ValueError(f"{name}: must be >= 0 (0 = no cap), got {getattr(config, name)}")
    for name in ("textract_job_lifetime_s", "google_docai_retention_s"):
        if not 0 < getattr(config, name) < math.inf:
            raise ValueError(f"{name}: must be a finite number > 0, got {getattr(config, name)}")


def _from_json(name: str, raw: Any) -> Any:
    """Coerce one PATCH value; strings go through the same parser as the environment."""
    if isinstance(raw, str):
        return _PARSERS[name](raw.strip())
    new_vendor = _new_vendor_json(name, raw)
    if new_vendor is not None:
        return new_vendor[0]
    if name in ("latency_ms", "duration_s"):
        if not isinstance(raw, list) or len(raw) != 2:
            raise ValueError("expected [min, max]")
        return (_json_number(raw[0]), _json_number(raw[1]))
    if name == "vendors_faulty":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise ValueError("expected a list of vendor names")
        return _parse_vendors(",".join(raw)) if raw else frozenset()
    if name in ("cloudsquid_legacy_shape", "uptiq_stuck"):
        if not isinstance(raw, bool):
            raise ValueError("expected a boolean")
        return raw
    if raw is None and name == "nutrient_credits":
        return None
    if name == "seed" or name.endswith("_burst") or name in _CLOUD_INTS:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError("expected an integer")
        return raw
    if name.endswith("_api_key") or _PARSERS[name] is _parse_str:
        raise ValueError("expected a string")
    return _json_number(raw)


def _json_number(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError("expected a number")
    return float(raw)


def _new_vendor_json(name: str, raw: Any) -> tuple[Any] | None:
    """Coerce a non-string PATCH value of an Azure DI or LlamaParse knob; None for the other knobs."""
    if not name.startswith(("azure_di_", "llamaparse_")):
        return None
    if name in _NEW_STRS:
        raise ValueError("expected a string")
    if name == "llamaparse_failed_pages":
        if not isinstance(raw, bool):
            raise ValueError("expected a boolean")
        return (raw,)
    if name == "llamaparse_credits" and raw is None:
        return (None,)
    if name in _NEW_INTS or name.endswith("_burst") or name == "llamaparse_refusal_status":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError("expected an integer")
        return (raw,)
    return (_json_number(raw),)
