"""A Prometheus server's HTTP API: PromQL instant queries (``GET /api/v1/query``), for the drift report's and
the inventory's GPU telemetry (:class:`gpuplan.providers.protocols.MetricsQuerier`).

The answer's envelope is fleet facts §8 (``docs/querying/api.md`` of prometheus/prometheus): ``{status,
data: {resultType, result}, errorType, error}``, a vector item ``{metric, value: [<unix time>, "<value>"]}``.
Only the standard library talks to the server (``urllib``; no new dependency): the bearer token is read from
a file (a ServiceAccount token, a secret mounted in the CronJob's pod) and sent as an ``Authorization``
header that is never logged, never put in an error, and not sent on to a redirect's target
(``add_unredirected_header``); a CA file verifies the server's certificate; every request has a timeout; an
answer is read as it arrives, one series at a time (:mod:`gpuplan.providers.prometheus_stream`), and one
larger than ``max_bytes`` is refused rather than read on. Any failure is one :class:`PrometheusError`
naming the server (without user info in the URL) with a hint: the report cannot judge the GPUs then.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import ConfigError, ProviderError
from gpuplan.providers.prometheus_stream import AnswerTooLarge, Envelope, MalformedAnswer, items
from gpuplan.providers.protocols import PromSample

QUERY_PATH = "/api/v1/query"
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""A 5000-node fleet with 8 GPUs each is 40 000 series of ~400 bytes a query: 16 MiB; four times that."""
MAX_TOKEN_BYTES = 64 * 1024


class PrometheusError(ProviderError):
    """The Prometheus server could not be asked or gave no usable answer."""


class PrometheusClient:
    """Instant queries to one Prometheus server; ``request_count`` counts the requests made."""

    def __init__(
        self,
        url: str,
        *,
        bearer_token_file: str | Path | None = None,
        ca_file: str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.url = shown(url)
        self._base = _checked_base(url)
        self._token = _read_token(Path(bearer_token_file)) if bearer_token_file else None
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=_tls_context(Path(ca_file) if ca_file else None))
        )
        self._timeout = timeout
        self._max_bytes = max_bytes
        self.request_count = 0

    def query(self, promql: str) -> list[PromSample]:
        """The instant vector ``promql`` evaluates to at the server's now."""
        return list(self.stream(promql))

    def stream(self, promql: str) -> Iterator[PromSample]:
        """:meth:`query`'s series one at a time, as the answer arrives (:mod:`prometheus_stream`): a fleet's
        answer is never held whole. An error may come after some series: the caller's fold is then moot."""
        envelope = Envelope()
        with self._open(QUERY_PATH, {"query": promql}) as response:
            try:
                for item in items(response.read, envelope, max_bytes=self._max_bytes):
                    self._check(envelope, promql)
                    yield self._sample(item, promql)
            except MalformedAnswer:
                raise self._not_the_api() from None
            except AnswerTooLarge:
                raise self._too_large() from None
            except OSError as exc:
                raise self._unreachable(exc) from None
        self._check(envelope, promql)

    def close(self) -> None:
        """Nothing stays open between requests (one connection each); kept for the protocol."""

    @contextmanager
    def _open(self, path: str, params: dict[str, str]) -> Iterator[IO[bytes]]:
        request = urllib.request.Request(
            f"{self._base}{path}?{urllib.parse.urlencode(params)}", headers={"Accept": "application/json"}
        )
        if self._token is not None:
            request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        self.request_count += 1
        try:
            response = self._opener.open(request, timeout=self._timeout)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._unreachable(exc) from None
        with response:
            yield response

    def _check(self, envelope: Envelope, promql: str) -> None:
        """Raise unless the answer (as far as read) is a successful instant vector."""
        if not envelope.is_object or envelope.status is None:
            raise self._not_the_api()
        if envelope.status != "success":
            raise self._error(f"the query failed: {envelope.error_type}: {envelope.error}")
        if envelope.result_type != "vector":
            kind = envelope.result_type if envelope.data_is_object else None
            raise self._error(f"the query {promql} did not return an instant vector (resultType {kind})")

    def _too_large(self) -> PrometheusError:
        return self._error(
            f"the answer is larger than {self._max_bytes} bytes",
            hint="the query matched more series than a fleet's GPUs: check the server is the right one",
        )

    def _not_the_api(self) -> PrometheusError:
        return self._error(
            "the answer is not the Prometheus HTTP API's JSON",
            hint="point the URL at the Prometheus server itself (the path before /api/v1)",
        )

    def _unreachable(self, exc: OSError) -> PrometheusError:
        reason = getattr(exc, "reason", exc)
        return self._error(
            f"cannot reach Prometheus: {reason}",
            hint="check the URL (--prometheus or spec.telemetry.prometheus.url), that the server runs, "
            "and, for https, its caFile",
        )

    def _http_error(self, exc: urllib.error.HTTPError) -> PrometheusError:
        try:
            document = json.loads(exc.read(64 * 1024))
            said = (
                f": {document.get('errorType')}: {document.get('error')}"
                if isinstance(document, dict)
                else ""
            )
        except ValueError:
            said = ""
        hint = (
            "check spec.telemetry.prometheus.bearerTokenFile: the server refused its token (or wants one)"
            if exc.code in (401, 403)
            else "check the URL (--prometheus or spec.telemetry.prometheus.url) and the server's log"
        )
        return self._error(f"Prometheus answered HTTP {exc.code}{said}", hint=hint)

    def _sample(self, item: Any, promql: str) -> PromSample:
        try:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise self._error(f"the query {promql} returned a malformed vector item") from None
        return PromSample(labels, value)

    def _error(self, summary: str, *, hint: str = "") -> PrometheusError:
        return PrometheusError(
            summary,
            where=self.url,
            hint=hint or "check the server's state at its /-/ready and /targets pages",
        )


def shown(url: str) -> str:
    """The URL as errors name it: without a ``user:password@`` part."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _checked_base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "not an http(s) URL of a Prometheus server",
            where=shown(url),
            hint="give the server's base URL, e.g. http://prometheus.monitoring:9090",
        )
    return url.rstrip("/")


def _read_token(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the Prometheus bearer token: {exc.strerror or exc}",
            where=str(path),
            hint="check spec.telemetry.prometheus.bearerTokenFile",
        ) from None
    token = data.decode("utf-8", "replace").strip()
    if len(data) > MAX_TOKEN_BYTES or not token or any(c in token for c in "\r\n"):
        raise ConfigError(
            "the Prometheus bearer token file does not hold one token",
            where=str(path),
            hint="the file holds the token alone, on one line",
        )
    return token


def _tls_context(ca_file: Path | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load the Prometheus CA file: {getattr(exc, 'strerror', None) or exc}",
            where=str(ca_file),
            hint="check spec.telemetry.prometheus.caFile: a PEM file of the CA that signed the server",
        ) from None
