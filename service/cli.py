"""The ``hookbridge`` command: api, worker, simulator, dev, demo, reseal-secrets, settings; --version."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from service.config import settings as settings_mod
from service.observability import logs, tracing

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from service.vendors.base import VendorSpec

T = TypeVar("T")


def _vendor_specs() -> dict[str, VendorSpec]:
    """The composition root loads the vendor plugins and hands them to what needs them."""
    from service.vendors import registry

    try:
        return registry.vendors()
    except registry.PluginError as exc:
        _configuration_error(exc)


def _settings() -> settings_mod.Settings:
    try:
        return settings_mod.load(os.environ, vendors=_vendor_specs())
    except settings_mod.SettingsError as exc:
        _configuration_error(exc)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("hookbridge")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "unknown"


def _configuration_error(exc: Exception) -> NoReturn:
    """One line on stderr, exit 2: a bad setting or an unusable vendor plugin, never a traceback."""
    text = str(exc)
    plugin = isinstance(exc, settings_mod.VendorPluginError) or not isinstance(
        exc, settings_mod.SettingsError
    )
    if not text.startswith("HOOKBRIDGE_") and not plugin:
        text = "HOOKBRIDGE_" + text
    print(f"hookbridge: configuration error: {text}", file=sys.stderr)
    raise SystemExit(2) from None


def _tracing(process: str) -> None:
    """OpenTelemetry traces when the ``OTEL_*`` variables ask for them (off by default)."""
    try:
        if tracing.setup(process):
            logs.get().info("tracing on", exporter=tracing.wanted(os.environ))
    except ValueError as exc:  # an exporter this build does not ship
        _configuration_error(exc)


def _require_redis(settings: settings_mod.Settings, command: str) -> None:
    if not settings.connection.configured:
        print(
            f"hookbridge {command}: HOOKBRIDGE_REDIS_URL (or HOOKBRIDGE_REDIS_SENTINELS, "
            "HOOKBRIDGE_REDIS_CLUSTER_NODES) is required; only dev and demo start a Redis of their own",
            file=sys.stderr,
        )
        raise SystemExit(2)


def cmd_api(args: argparse.Namespace) -> None:
    import uvicorn

    from service.api.app import create_app
    from service.serving.server import api_config

    settings = _settings()
    _require_redis(settings, "api")
    logs.configure(settings.log_format, settings.log_level)
    _tracing("api")
    if not settings.api_keys:
        logs.get().warning("HOOKBRIDGE_API_KEYS is empty: every request will be refused")
    for note in settings_mod.warnings(settings):
        logs.get().warning("setting raised", detail=note)
    config = api_config(
        create_app(settings),
        settings.api_limits,
        host=args.host,
        port=args.port,
        proxy_headers=True,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
    )
    uvicorn.Server(config).run()


def _run(main: Coroutine[Any, Any, T]) -> T:
    """Runs on uvloop when it is installed (it comes with uvicorn[standard]): about twice the requests
    per second of the stock loop for the worker's I/O."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(main)
    return uvloop.run(main)


def cmd_worker(args: argparse.Namespace) -> None:
    from service.vendors.registry import PluginError as VendorPluginError
    from service.worker.runtime import WorkerRuntime, tune_gc

    settings = _settings()
    _require_redis(settings, "worker")
    logs.configure(settings.log_format, settings.log_level)
    processes = args.processes or settings.worker_processes
    if processes > 1:
        from service.worker.supervisor import supervise

        raise SystemExit(supervise(processes, settings.worker_metrics_port, settings.shutdown_grace_s))
    _tracing("worker")

    async def main() -> None:
        try:
            worker = WorkerRuntime(settings)
        except VendorPluginError as exc:  # an adapter that cannot be built from its settings
            _configuration_error(exc)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.request_stop)
        tune_gc()  # the process's own: not in WorkerRuntime, which tests run inside theirs
        await worker.run()

    _run(main())


def cmd_simulator(args: argparse.Namespace) -> None:
    import uvicorn

    from service.simulator import SimulatorConfig, create_app

    logs.configure(
        os.environ.get("HOOKBRIDGE_LOG_FORMAT", "console"), os.environ.get("HOOKBRIDGE_LOG_LEVEL", "INFO")
    )
    try:
        config = SimulatorConfig.from_env(os.environ)
    except ValueError as exc:
        print(f"hookbridge simulator: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_config=None, access_log=False)


def _dev_module(command: str) -> None:
    """The image leaves service/dev/ out (.dockerignore): say so instead of a traceback."""
    import importlib

    try:
        importlib.import_module("service.dev")
    except ModuleNotFoundError:
        print(
            f"hookbridge {command}: not in this installation (service/dev/ is left out of the image); "
            "run it from a source checkout: make venv && .venv/bin/hookbridge " + command,
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def cmd_dev(args: argparse.Namespace) -> None:
    _dev_module("dev")
    from service.dev.stack import run_stack

    logs.configure(
        os.environ.get("HOOKBRIDGE_LOG_FORMAT", "console"), os.environ.get("HOOKBRIDGE_LOG_LEVEL", "INFO")
    )
    _tracing("dev")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            async with run_stack(api_port=args.port, simulator_port=args.simulator_port) as stack:
                print(
                    f"hookbridge dev: API {stack.api_url} (key: dev-key), console {stack.api_url}/console/, "
                    f"simulator {stack.simulator_url}, redis {stack.redis_url}. Ctrl-C stops.",
                    flush=True,
                )
                await stop.wait()
        except settings_mod.SettingsError as exc:
            print(f"hookbridge dev: configuration error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    _run(main())


def cmd_demo(args: argparse.Namespace) -> None:
    _dev_module("demo")
    from service.dev.demo import main

    raise SystemExit(_run(main(timeout_s=args.timeout)))


def cmd_reseal_secrets(args: argparse.Namespace) -> None:
    """Seals every subscription secret under the first SECRET_KEYS key: after setting the keys, or after
    putting a new key first (then the old key can be dropped)."""
    from service.store import Store, connect

    settings = _settings()
    _require_redis(settings, "reseal-secrets")
    if not settings.secret_keys:
        print(
            "hookbridge reseal-secrets: HOOKBRIDGE_SECRET_KEYS is not set: nothing to seal with",
            file=sys.stderr,
        )
        raise SystemExit(2)

    async def main() -> dict[str, int]:
        store = Store(connect(settings), settings)
        try:
            return await store.subscriptions.reseal_secrets()
        finally:
            await store.close()

    counts = _run(main())
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    if counts["unavailable"]:
        print("some secrets are sealed with a key that SECRET_KEYS no longer lists", file=sys.stderr)
        raise SystemExit(1)


async def _on_redis(settings: settings_mod.Settings, work: Callable[[Redis], Awaitable[T]]) -> T:
    """``work`` on a Redis client of the settings' (one Redis, Sentinel or a cluster), closed after it."""
    from service.store import connect

    redis: Redis = connect(settings)
    try:
        return await work(redis)
    finally:
        await redis.aclose()


def cmd_spell_out_runs(args: argparse.Namespace) -> None:
    """Rewrites every run record in the form the versions before run records without their id read (plain,
    never compact), with every process of this version stopped (docs/deploy.md, "Upgrading from a version
    before run records without their id", "... before compact finished runs"): what a rollback across
    either change needs."""
    from service.store.layout import spell_out_runs

    settings = _settings()
    _require_redis(settings, "spell-out-runs")
    print(" ".join(f"{k}={v}" for k, v in _run(_on_redis(settings, spell_out_runs)).items()))


def cmd_spell_out_events(args: argparse.Namespace) -> None:
    """Rewrites every client's feed, every run's event bodies and every delivery's attempt log in the forms
    the versions before short feed entries read, with every process of this version stopped (docs/deploy.md,
    "Upgrading from a version before short feed entries"): what a rollback across that change needs."""
    from service.store.layout import spell_out_events

    settings = _settings()
    _require_redis(settings, "spell-out-events")
    print(" ".join(f"{k}={v}" for k, v in _run(_on_redis(settings, spell_out_events)).items()))


def cmd_migrate_keys(args: argparse.Namespace) -> None:
    """Moves the keys that hookbridge 2 (``hb:<name>``) or an earlier hookbridge 3 (``hb:{hb}:<name>``)
    wrote to today's layout (service/store/layout.py), with every earlier process stopped (docs/deploy.md,
    "Upgrading from hookbridge 2" and "from an earlier hookbridge 3")."""
    from service.store.layout import PendingDeliveries, move_untagged_keys

    settings = _settings()
    _require_redis(settings, "migrate-keys")
    try:
        counts = _run(_on_redis(settings, move_untagged_keys))
    except PendingDeliveries as exc:
        print(
            f"hookbridge migrate-keys: {exc}; on a cluster, let the earlier workers deliver them first "
            "(docs/deploy.md, 'Upgrading from an earlier hookbridge 3')",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    if counts["kept"]:
        print("some keys exist in both layouts: today's were kept, the others left", file=sys.stderr)
        raise SystemExit(1)


def cmd_settings(args: argparse.Namespace) -> None:
    """Every setting with its default; with ``--effective``, the configuration this environment gives
    (validated as ``api`` and ``worker`` would, secrets redacted)."""
    if args.effective:
        rows = settings_mod.effective(_settings())
    else:
        try:
            rows = settings_mod.defaults(_vendor_specs())
        except settings_mod.SettingsError as exc:
            _configuration_error(exc)
    for name, value in rows:
        print(f"{name}={value}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hookbridge", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hookbridge {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("api", help="the HTTP API")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8080)
    p.set_defaults(func=cmd_api)
    p = sub.add_parser("worker", help="submits, polls, delivers, sweeps")
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes to run under one supervisor (default: HOOKBRIDGE_WORKER_PROCESSES, 1)",
    )
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser("simulator", help="every simulated vendor's async API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.set_defaults(func=cmd_simulator)
    p = sub.add_parser("dev", help="everything on one machine")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--simulator-port", type=int, default=8090)
    p.set_defaults(func=cmd_dev)
    p = sub.add_parser("demo", help="the main job end to end on embedded defaults")
    p.add_argument("--timeout", type=float, default=120.0)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser(
        "reseal-secrets", help="seal every subscription secret under the first SECRET_KEYS key"
    )
    p.set_defaults(func=cmd_reseal_secrets)
    p = sub.add_parser("migrate-keys", help="move an earlier version's keys to this version's layout")
    p.set_defaults(func=cmd_migrate_keys)
    p = sub.add_parser(
        "spell-out-runs",
        help="before a rollback across run records without their id or compact finished runs: rewrite them "
        "as earlier ones read them",
    )
    p.set_defaults(func=cmd_spell_out_runs)
    p = sub.add_parser(
        "spell-out-events",
        help="before a rollback across short feed entries: rewrite feeds, event bodies and attempt logs as "
        "earlier ones",
    )
    p.set_defaults(func=cmd_spell_out_events)
    p = sub.add_parser("settings", help="print every setting with its default")
    p.add_argument(
        "--effective",
        action="store_true",
        help="print the configuration this environment gives, validated, secrets redacted",
    )
    p.set_defaults(func=cmd_settings)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
