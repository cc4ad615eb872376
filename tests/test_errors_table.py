"""The one table of foreign exceptions (neuronc/errors.py FOREIGN_ERRORS), walked row by row: a real
instance of each foreign exception maps to the row's class, exit code and hint."""

from __future__ import annotations

import errno
import importlib
import shutil
import socket

import pytest
import requests
from botocore.exceptions import EndpointConnectionError, NoCredentialsError
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from tuf.api.exceptions import DownloadError

from neuronc.errors import (
    DISK_FULL,
    EXIT_ENVIRONMENT,
    EXIT_INVALID_INPUT,
    FOREIGN_ERRORS,
    MISSING_LIBRARY,
    NETWORK,
    CheckpointError,
    DiskFullError,
    EnvironmentIncompatibleError,
    InvalidInputError,
    RemoteStoreError,
    foreign_row,
    from_foreign,
    short_reason,
)


def _response(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.url = "https://huggingface.co/api/models/acme/tiny"
    return response


def _refused_connection() -> OSError:
    """What connecting to a local port nobody listens on raises."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: a connection is refused
        with socket.socket() as client:
            try:
                client.connect(("127.0.0.1", port))
            except OSError as exc:
                return exc
    raise AssertionError("a connection to a port nobody listens on succeeded")


def _import_error() -> ImportError:
    try:
        importlib.import_module("neuronc_no_such_module")
    except ImportError as exc:
        return exc
    raise AssertionError("imported a module that does not exist")


def _invalid_repo_id() -> Exception:
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

    try:
        validate_repo_id("not a repo id!")
    except Exception as exc:
        return exc
    raise AssertionError("validate_repo_id accepted 'not a repo id!'")


def _copytree_disk_full() -> shutil.Error:
    return shutil.Error([("a", "b", "[Errno 28] No space left on device: 'b'")])


# row name -> (real instances of the foreign exception, the exit code expected)
SAMPLES: dict[str, tuple[list[BaseException], int]] = {
    DISK_FULL.name: (
        [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "quota"), _copytree_disk_full()],
        EXIT_ENVIRONMENT,
    ),
    "the Hub has no such repository, or it is gated": (
        [RepositoryNotFoundError("404", response=_response(404)), GatedRepoError("403", response=_response(403))],
        EXIT_INVALID_INPUT,
    ),
    "the Hub repository has no such revision": (
        [RevisionNotFoundError("404", response=_response(404))],
        EXIT_INVALID_INPUT,
    ),
    "the Hub refused the credentials (401, 403)": (
        [HfHubHTTPError("401", response=_response(401)), HfHubHTTPError("403", response=_response(403))],
        EXIT_INVALID_INPUT,
    ),
    "not a Hugging Face repository id (huggingface_hub's validate_repo_id)": (
        [_invalid_repo_id()],
        EXIT_INVALID_INPUT,
    ),
    "offline, and the files are not in the local Hugging Face cache": (
        [LocalEntryNotFoundError("not cached"), OfflineModeIsEnabled("offline")],
        EXIT_INVALID_INPUT,
    ),
    MISSING_LIBRARY.name: ([_import_error()], EXIT_ENVIRONMENT),
    NETWORK.name: (
        [
            _refused_connection(),
            TimeoutError(),
            requests.ConnectionError("refused"),
            EndpointConnectionError(endpoint_url="https://s3.example"),
        ],
        EXIT_ENVIRONMENT,
    ),
    "Sigstore cannot be reached": ([DownloadError("tuf-repo-cdn.sigstore.dev")], EXIT_ENVIRONMENT),
    "a storage or HTTP client library failed": (
        [NoCredentialsError(), HfHubHTTPError("500", response=_response(500))],
        EXIT_ENVIRONMENT,
    ),
    "an operating-system error": (
        [OSError(errno.EIO, "I/O error"), PermissionError(errno.EACCES, "denied")],
        EXIT_ENVIRONMENT,
    ),
}


def test_every_row_has_samples() -> None:
    assert [row.name for row in FOREIGN_ERRORS] == list(SAMPLES)


@pytest.mark.parametrize("row", FOREIGN_ERRORS, ids=lambda row: row.name)
def test_each_row_maps_its_foreign_exceptions(row: object) -> None:
    samples, exit_code = SAMPLES[row.name]  # type: ignore[attr-defined]
    for exc in samples:
        assert foreign_row(exc) is row, exc
        error = from_foreign(exc, "doing it")
        assert error is not None
        assert type(error) is row.error  # type: ignore[attr-defined]
        assert error.exit_code == exit_code
        assert error.hint == row.hint  # type: ignore[attr-defined]
        assert error.message == (f"doing it: {short_reason(exc)}" if str(exc) else "doing it")


def test_a_site_narrows_the_class_but_never_the_exit_code() -> None:
    not_found = RepositoryNotFoundError("404", response=_response(404))
    narrowed = from_foreign(not_found, "model 'acme/tiny'", error=CheckpointError, hint="check model.id")
    assert type(narrowed) is CheckpointError
    assert (narrowed.exit_code, narrowed.hint) == (EXIT_INVALID_INPUT, "check model.id")
    # A network failure stays an environment failure (exit 5), whatever the site would call it.
    offline = from_foreign(_refused_connection(), "download", error=CheckpointError)
    assert type(offline) is EnvironmentIncompatibleError
    store = from_foreign(_refused_connection(), "s3://b: listing failed", error=RemoteStoreError)
    assert type(store) is RemoteStoreError and store.exit_code == EXIT_ENVIRONMENT
    full = from_foreign(
        OSError(errno.ENOSPC, "No space left on device"), "s3://b: fetch failed", error=RemoteStoreError
    )
    assert type(full) is DiskFullError


def test_what_the_table_does_not_name_is_a_bug_and_propagates() -> None:
    for exc in (ValueError("bad"), KeyError("k"), RuntimeError("boom")):
        assert foreign_row(exc) is None
        assert from_foreign(exc, "doing it") is None
    assert issubclass(CheckpointError, InvalidInputError)
