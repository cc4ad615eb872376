"""The one error hierarchy of neuronc.

Every error carries the exit code the CLI returns for it (a contract for CI, see docs/exit-codes.md)
and an optional hint that tells the user what to do next. Library code raises these; only
``neuronc.cli.command_failed`` turns them into messages and exit codes.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_INVALID_INPUT = 2
EXIT_COMPILE_FAILED = 3
EXIT_VERIFICATION_FAILED = 4
EXIT_ENVIRONMENT = 5
EXIT_MISS = 6
EXIT_CANNOT_TELL = 7  # the pre-boot verdict: nothing checked differs, but parts are unchecked
EXIT_SLO_NOT_MET = 8  # neuronc bench: no bundle meets the SLO
EXIT_INTERRUPTED = 130


class NeuroncError(Exception):
    """Base class: a problem neuronc understands and can explain without a traceback."""

    exit_code: ClassVar[int] = EXIT_UNEXPECTED
    kind: ClassVar[str] = "error"

    def __init__(self, message: str, *, hint: str | None = None, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = list(details)

    def to_json(self) -> dict[str, object]:
        """Return the stable JSON form printed by ``--json`` commands on failure."""
        return {
            "error": self.kind,
            "exit_code": self.exit_code,
            "message": self.message,
            "details": self.details,
            "hint": self.hint,
        }


class InvalidInputError(NeuroncError):
    """The user gave something neuronc cannot use: a profile, an argument, a path."""

    exit_code = EXIT_INVALID_INPUT
    kind = "invalid_input"


class ProfileError(InvalidInputError):
    """A profile failed to load or validate; ``details`` lists every problem found."""

    kind = "profile_invalid"


class CheckpointError(InvalidInputError):
    """A model checkpoint is missing, truncated, or malformed."""

    kind = "checkpoint_invalid"


class UnknownBackendError(InvalidInputError):
    """A profile or flag names a backend that is not registered."""

    kind = "unknown_backend"


class BundleFormatError(InvalidInputError):
    """A path is not a bundle, or its manifest cannot be read safely."""

    kind = "bundle_invalid"


class PreflightError(InvalidInputError):
    """A build cannot fit the target: found before any compile starts."""

    kind = "preflight_failed"


class CompileError(NeuroncError):
    """The backend's compiler failed. ``log_path`` points at the full log when there is one."""

    exit_code = EXIT_COMPILE_FAILED
    kind = "compile_failed"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        details: Sequence[str] = (),
        log_path: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, details=details)
        self.log_path = log_path

    def to_json(self) -> dict[str, object]:
        data = super().to_json()
        data["log_path"] = self.log_path
        return data


def log_tail(path: str | Path, lines: int = 20) -> list[str]:
    """The last non-blank ``lines`` lines of a compiler log (reads at most its last 64 KiB)."""
    try:
        with Path(path).open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            data = f.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


class VerificationError(NeuroncError):
    """A bundle failed an integrity or accuracy check."""

    exit_code = EXIT_VERIFICATION_FAILED
    kind = "verification_failed"


class SignatureError(VerificationError):
    """A bundle's signature does not verify against the trusted key, certificate or identity, or does
    not cover exactly the files its manifest lists."""

    kind = "signature_invalid"


class SignatureMissingError(SignatureError):
    """A signature was required (``--require-signature``, ``NEURONC_REQUIRE_SIGNATURE``) and the bundle has none."""

    kind = "signature_missing"


class EnvironmentIncompatibleError(NeuroncError):
    """The installed software cannot do what was asked (missing backend, toolchain mismatch)."""

    exit_code = EXIT_ENVIRONMENT
    kind = "environment_incompatible"


class BackendUnavailableError(EnvironmentIncompatibleError):
    """A backend's packages are not installed here."""

    kind = "backend_unavailable"


class DiskFullError(EnvironmentIncompatibleError):
    """A write ran out of space (or quota): the environment cannot hold what the job produces."""

    kind = "disk_full"


class RemoteStoreError(EnvironmentIncompatibleError):
    """A remote store could not be read or written (network, credentials, missing bucket, timeout)."""

    kind = "remote_store_error"


class SigstoreUnreachableError(EnvironmentIncompatibleError):
    """Sigstore (its TUF repository, Fulcio, Rekor or the OIDC issuer) could not be reached: keyless
    signing and verifying need the network."""

    kind = "sigstore_unreachable"


class CannotTellError(NeuroncError):
    """The pre-boot verdict cannot say yes: no checked part of the serving stack's key differs, but some
    parts could not be checked (each named in ``details`` with why, and how to check it)."""

    exit_code = EXIT_CANNOT_TELL
    kind = "cannot_tell"


class CacheMissError(NeuroncError):
    """A store or cache lookup missed where a hit was required (``--require-hit``, offline)."""

    exit_code = EXIT_MISS
    kind = "cache_miss"


class SloNotMetError(NeuroncError):
    """``neuronc bench``: no bundle met the SLO (the message names the one that came closest and by how much)."""

    exit_code = EXIT_SLO_NOT_MET
    kind = "slo_not_met"


# ------------------------------------------------------------------------------------------------
# Foreign exceptions, recognised in one place
# ------------------------------------------------------------------------------------------------

# Client libraries raise their own exception types (botocore's NoCredentialsError is not an
# OSError). huggingface_hub talks HTTP through requests (0.x) or httpx (1.x; 2.x uses its fork
# httpx2); only one of them is installed, so they are matched by package name, not imported.
CLIENT_LIBRARY_PACKAGES = frozenset(
    {
        "botocore",
        "aiobotocore",
        "s3fs",
        "fsspec",
        "aiohttp",
        "huggingface_hub",
        "requests",
        "httpx",
        "httpx2",
        "urllib3",
    }
)
_NETWORK_CLASS_NAMES = {
    "requests": frozenset({"ConnectionError", "Timeout"}),
    "httpx": frozenset({"TransportError"}),
    "httpx2": frozenset({"TransportError"}),
    "urllib3": frozenset({"MaxRetryError", "NewConnectionError", "TimeoutError", "ProtocolError"}),
    "aiohttp": frozenset({"ClientConnectionError", "ServerTimeoutError"}),
    "botocore": frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionError"}),
}
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _packages(exc: BaseException) -> list[tuple[str, str]]:
    return [(cls.__module__.split(".")[0], cls.__name__) for cls in type(exc).__mro__]


def is_client_library_error(exc: BaseException) -> bool:
    """An exception raised by a storage or HTTP client library (S3, the Hub, fsspec)."""
    return any(package in CLIENT_LIBRARY_PACKAGES for package, _ in _packages(exc))


def is_network_error(exc: BaseException) -> bool:
    """A connection failure or timeout, from the standard library or a client library."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return any(name in _NETWORK_CLASS_NAMES.get(package, ()) for package, name in _packages(exc))


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT anywhere in the exception's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL_ERRNOS:
            return True
        # shutil.copytree gathers its copy errors into one shutil.Error (an OSError without errno)
        # whose message lists each "[Errno 28] No space left on device".
        if (
            isinstance(seen, OSError)
            and seen.errno is None
            and any(f"[Errno {n}]" in str(seen) for n in _DISK_FULL_ERRNOS)
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _hub_error(*names: str) -> Callable[[BaseException], bool]:
    """huggingface_hub's error classes by name (matched without importing huggingface_hub)."""
    wanted = frozenset(names)
    return lambda exc: any(p == "huggingface_hub" and n in wanted for p, n in _packages(exc))


def _hub_access_refused(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    return _hub_error("HfHubHTTPError")(exc) and getattr(response, "status_code", None) in (401, 403)


@dataclass(frozen=True)
class Foreign:
    """One row of the table: which foreign exceptions (a predicate), the NeuroncError class they
    become (so their exit code) and what the user can do."""

    name: str
    matches: Callable[[BaseException], bool]
    error: type[NeuroncError]
    hint: str | None

    def convert(
        self,
        exc: BaseException,
        doing: str,
        *,
        error: type[NeuroncError] | None = None,
        hint: str | None = None,
        details: Sequence[str] = (),
    ) -> NeuroncError:
        """``exc`` as this row's error, ``"<doing>: <reason>"``; ``error`` narrows the class (a subclass
        of the row's; any other class is ignored, so the exit code stays the table's), ``hint``
        replaces the row's with one naming the site's own flag or file."""
        cls = error if error is not None and issubclass(error, self.error) else self.error
        message = f"{doing}: {short_reason(exc)}" if str(exc).strip() else doing  # TimeoutError() says nothing
        return cls(message, hint=hint or self.hint, details=details)


_HF_TOKEN_HINT = "check the repo id; a private or gated repository needs HF_TOKEN (or `hf auth login`)"
DISK_FULL = Foreign(
    "disk full (ENOSPC, EDQUOT)",
    is_disk_full,
    DiskFullError,
    "free space there, or write somewhere else (--out, --store, NEURONC_STORE, NEURONC_CACHE_DIR)",
)
MISSING_LIBRARY = Foreign(
    "an optional library is not installed",
    lambda exc: isinstance(exc, ImportError),
    EnvironmentIncompatibleError,
    "install the extra that brings it (pip install 'neuronc[...]', see docs/backends.md)",
)
NETWORK = Foreign(
    "a connection failed or timed out",
    is_network_error,
    EnvironmentIncompatibleError,
    "check the network and the endpoint (HF_ENDPOINT, the store's URL), then run again",
)

# What the Hub answers about a repository that is not there for this user: exit 2, whoever asked.
HUB_NOT_FOUND = Foreign(
    "the Hub has no such repository, or it is gated",
    _hub_error("RepositoryNotFoundError", "GatedRepoError"),
    InvalidInputError,
    _HF_TOKEN_HINT,
)
HUB_NO_REVISION = Foreign(
    "the Hub repository has no such revision",
    _hub_error("RevisionNotFoundError"),
    InvalidInputError,
    "pin a commit, tag or branch that exists",
)
HUB_DENIED = Foreign(
    "the Hub refused the credentials (401, 403)", _hub_access_refused, InvalidInputError, _HF_TOKEN_HINT
)
HUB_REFUSED = (HUB_NOT_FOUND, HUB_NO_REVISION, HUB_DENIED)
HUB_INVALID_ID = Foreign(
    "not a Hugging Face repository id (huggingface_hub's validate_repo_id)",
    _hub_error("HFValidationError"),
    InvalidInputError,
    "a repository id is namespace/name, e.g. aws-neuron/optimum-neuron-cache",
)

# Sigstore's clients (sigstore, tuf, id) say "unreachable" with these classes of their own.
_SIGSTORE_UNREACHABLE_NAMES = frozenset(
    {"TUFError", "NetworkError", "DownloadError", "SlowRetrievalError", "FetcherHTTPError"}
)


def _sigstore_unreachable(exc: BaseException) -> bool:
    """A failure to reach Sigstore (TUF repository, Fulcio, Rekor, the OIDC issuer) anywhere in the chain."""
    seen: BaseException | None = exc
    while seen is not None:
        sigstore_classes = [n for p, n in _packages(seen) if p in {"sigstore", "tuf", "id"}]
        if is_network_error(seen) or not _SIGSTORE_UNREACHABLE_NAMES.isdisjoint(sigstore_classes):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


SIGSTORE_UNREACHABLE = Foreign(
    "Sigstore cannot be reached",
    _sigstore_unreachable,
    SigstoreUnreachableError,
    "Sigstore keyless signing needs the network (tuf-repo-cdn.sigstore.dev, Fulcio, Rekor); "
    "offline, sign with a key or a certificate instead",
)

# The one mapping from foreign exceptions to neuronc's (as huggingface_hub's cli/_errors.py maps its
# own): the first row whose predicate matches decides the class and the hint. A site names what it
# was doing (``from_foreign``) and may narrow the class to a subclass of the row's (CheckpointError
# for an InvalidInputError row, RemoteStoreError for an EnvironmentIncompatibleError row): the exit
# code is always the table's. tests/test_errors_table.py walks it with real instances.
FOREIGN_ERRORS: tuple[Foreign, ...] = (
    DISK_FULL,
    *HUB_REFUSED,
    HUB_INVALID_ID,
    Foreign(
        "offline, and the files are not in the local Hugging Face cache",
        _hub_error("LocalEntryNotFoundError", "OfflineModeIsEnabled"),
        InvalidInputError,
        "download it once with network access (`hf download`), or pass a local directory",
    ),
    MISSING_LIBRARY,
    NETWORK,
    SIGSTORE_UNREACHABLE,
    Foreign("a storage or HTTP client library failed", is_client_library_error, EnvironmentIncompatibleError, None),
    Foreign("an operating-system error", lambda exc: isinstance(exc, OSError), EnvironmentIncompatibleError, None),
)


def foreign_row(exc: BaseException) -> Foreign | None:
    """The row of ``FOREIGN_ERRORS`` that ``exc`` matches first; None for an exception neuronc does
    not expect from its environment (a bug: it propagates)."""
    return next((row for row in FOREIGN_ERRORS if row.matches(exc)), None)


def from_foreign(
    exc: BaseException,
    doing: str,
    *,
    error: type[NeuroncError] | None = None,
    hint: str | None = None,
    details: Sequence[str] = (),
) -> NeuroncError | None:
    """The NeuroncError the table maps ``exc`` to (``Foreign.convert``); None when no row matches.
    A handler of one kind of exception (ImportError) converts through its row: ``MISSING_LIBRARY.convert``.
    """
    row = foreign_row(exc)
    return None if row is None else row.convert(exc, doing, error=error, hint=hint, details=details)


def short_reason(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message for people (its class name when it has none)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if len(first) <= limit else first[: limit - 3] + "..."


# What a terminal acts on: C0 controls but line feed and tab, DEL, and the C1 controls (U+0080-U+009F,
# CSI among them).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_JSON_CONTROLS = re.compile("[\x7f-\x9f]")


def controls_escaped(text: str) -> str:
    """``text`` with every control character a terminal acts on written ``\\xNN`` (line feeds and tabs stay).

    Messages quote values from files (a manifest, a bundle path): a control character among them
    would reach the terminal as a command.
    """
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def json_controls_escaped(text: str) -> str:
    """JSON text with DEL and the C1 controls escaped (``\\u009b``), as JSON escapes only U+0000-U+001F:
    a document printed to a terminal cannot drive it. JSON has no such characters outside strings,
    so no value changes."""
    return _JSON_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def safe_text(value: object, limit: int = 200) -> str:
    """A value from a file (a name, a path) made safe to show in a one-line message: no control
    characters or lone surrogates (they would break the terminal or a UTF-8 ``--json`` document),
    bounded length."""
    text = str(value)
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[: limit * 2])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def printable(text: str) -> str:
    """``text`` safe to print and to put in JSON: bytes that are not UTF-8 and control characters escaped.

    The one escaping of a name from a file, a directory listing or a cache (a model id, a cache folder,
    a registry path) before it goes into a message, a table or a generated document: line feeds too,
    since a name is one line.

    File names come from a directory listing (``os.scandir`` keeps undecodable bytes as lone
    surrogates) or a server, strings from JSON documents may hold lone surrogates (``"\\ud800"``);
    none of them may reach a terminal or ``--json`` raw.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            text = os.fsencode(text).decode("utf-8", "backslashreplace")  # the bytes of a file name
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate from JSON
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
