"""Azure's own URL form names a container at an account before the host:
``abfss://<container>@<account>.dfs.core.windows.net/<path>``. The part before ``@`` is
the container, not a credential, so such a URL is a store root and a ``segment.path``
(obstore opens it); a URL with a password before ``@`` stays refused, on every scheme,
without showing it.
"""

from __future__ import annotations

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.urls import check_url, root_location

AZURE = "abfss://events@acct.dfs.core.windows.net/quiver/store"


@pytest.mark.parametrize("scheme", ["abfs", "abfss", "az"])
def test_a_container_at_an_account_is_a_root(scheme: str) -> None:
    url = AZURE.replace("abfss", scheme, 1)
    assert root_location("path", url + "/") == url


def test_a_container_at_an_account_is_a_segment_path() -> None:
    check_url("segment.path", AZURE)  # raises when refused


@pytest.mark.parametrize(
    "url",
    [
        "abfss://events:s3cr3tpassword@acct.dfs.core.windows.net/q",
        "s3://AKIAUSER:s3cr3tpassword@bucket/q",
        "s3://AKIAUSER@bucket/q",
        "gs://someone@bucket/q",
    ],
)
def test_a_credential_before_the_at_sign_is_refused_without_showing_it(url: str) -> None:
    for check in (lambda: root_location("path", url), lambda: check_url("segment.path", url)):
        with pytest.raises(ConfigError) as e:
            check()
        assert "without credentials in it" in str(e.value)
        assert "s3cr3tpassword" not in str(e.value) and "AKIAUSER" not in str(e.value)
