"""The evidence bundle's license: the setting (``license=``, an SPDX identifier, recorded in ``sweep.json``), its
default and how the bundle's RO-Crate names it.

The default is CC-BY-4.0: a bundle is research data and text (metrics, evaluations, model responses, a report),
for which a software license is the wrong kind; CC BY 4.0 lets anyone reuse it while keeping the attribution a
result needs, and it is what Zenodo and WorkflowHub offer data by default and what the RO-Crate specification's
own examples use. A lab whose results are not for reuse, or that wants none kept (CC0-1.0), sets ``license=``.
"""

from __future__ import annotations

DEFAULT_LICENSE = "CC-BY-4.0"
LICENSE_FIELD = "license"  # sweep.json's field: the license the launcher was given
# An SPDX license identifier (``MIT``, ``CC-BY-4.0``, ``Apache-2.0``, ``LicenseRef-lab-internal``).
SPDX_ID = r"[A-Za-z0-9][A-Za-z0-9.+-]{0,63}"
SPDX_LICENSES_URL = "https://spdx.org/licenses/"


def license_url(spdx_id: str) -> str:
    """The SPDX page naming a license: the crate's license entity's ``@id``."""
    return f"{SPDX_LICENSES_URL}{spdx_id}"
