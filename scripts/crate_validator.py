"""Set up roc-validator for the crate's tests, without network at test time: ``make crate-validator`` runs
``python scripts/crate_validator.py warm <venv>`` with the validator's venv (``.venv-crate/``, not the project's).

roc-validator fetches the crate's JSON-LD context (``https://w3id.org/ro/crate/1.1/context``) over HTTP through
its own HTTP cache, and in ``--offline`` mode answers from that cache alone. Neither this machine nor CI reaches
w3id.org, so the cache is filled from a copy that a package on PyPI ships: ro-crate-py 0.9.0's
``rocrate/data/ro-crate.jsonld`` is the RO-Crate 1.1 context (its ``@id`` and ``version`` say so, checked here),
downloaded with pip into ``<venv>/wheels/``. It is stored as the validator would have stored the fetched document,
through requests-cache's own session (a requests transport adapter answers the one URL from the file), so the
tests run ``rocrate-validator validate --offline --cache-path <venv>/http-cache``.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

CONTEXT_URL = "https://w3id.org/ro/crate/1.1/context"
CONTEXT_IN_WHEEL = "rocrate/data/ro-crate.jsonld"
WHEEL_GLOB = "rocrate-0.9.0-*.whl"
CACHE_NAME = "http-cache"
# What roc-validator's JSON-LD loader sends (rocrate_validator.utils.document_loader); the cache key holds it.
ACCEPT = "application/ld+json, application/json, */*;q=0.1"


def context_document(venv: Path) -> bytes:
    """The RO-Crate 1.1 context as ro-crate-py 0.9.0's wheel ships it (refused if it is another version)."""
    wheels = sorted((venv / "wheels").glob(WHEEL_GLOB))
    if not wheels:
        raise SystemExit(f"no {WHEEL_GLOB} in {venv / 'wheels'}: pip download --no-deps -d {venv / 'wheels'} rocrate==0.9.0")
    with zipfile.ZipFile(wheels[0]) as wheel:
        body = wheel.read(CONTEXT_IN_WHEEL)
    document = json.loads(body)
    if document.get("@id") != CONTEXT_URL or not str(document.get("version", "")).startswith("1.1"):
        raise SystemExit(f"{wheels[0].name}'s {CONTEXT_IN_WHEEL} is not the RO-Crate 1.1 context")
    return body


def warm(venv: Path) -> None:
    from requests.adapters import HTTPAdapter
    from requests_cache import CachedSession
    from urllib3 import HTTPResponse

    body = context_document(venv)

    class OneDocument(HTTPAdapter):
        """A transport that answers the context's URL with the wheel's copy, and nothing else."""

        def send(self, request, **kwargs):
            if request.url != CONTEXT_URL:
                raise OSError(f"no network here: {request.url}")
            raw = HTTPResponse(body=io.BytesIO(body), status=200, preload_content=False, decode_content=False,
                               headers={"Content-Type": "application/ld+json", "Content-Length": str(len(body))},
                               request_url=request.url)
            return self.build_response(request, raw)

    # The session roc-validator opens on --cache-path (rocrate_validator.utils.http.HttpRequester).
    session = CachedSession(cache_name=str(venv / CACHE_NAME), backend="sqlite", expire_after=-1,
                            allowable_methods=("GET",), allowable_codes=(200, 302, 404))
    session.mount("https://", OneDocument())
    response = session.get(CONTEXT_URL, headers={"Accept": ACCEPT}, allow_redirects=True)
    if response.status_code != 200 or response.content != body:
        raise SystemExit(f"could not cache {CONTEXT_URL}")
    print(f"cached {CONTEXT_URL} ({len(body)} bytes, RO-Crate {json.loads(body)['version']}) in {venv / CACHE_NAME}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "warm":
        raise SystemExit("usage: python scripts/crate_validator.py warm <validator venv>")
    warm(Path(sys.argv[2]))
