"""Storage options of an object root: the keys its client takes, checked before
anything is contacted, and never shown with their secrets (ARCHITECTURE.md §2).

Storage options are obstore's configuration keys (``aws_endpoint``,
``aws_access_key_id``, ``google_service_account``, ``azure_storage_account_key``...,
with or without the ``aws_``/``google_``/``azure_`` prefix), its HTTP client keys
(``allow_http``, ``timeout``, ``proxy_url``...) and the one Quiver reads itself,
``retry_timeout`` (:data:`~quiver_spark.option_table.STORAGE_OPTION_TABLE`; never
handed to obstore). A key the root's client does not know is refused with the near
misses named; every value of a key that names a secret is shown as ``***``
(:func:`redact`), an access key id by its first and last characters. A key may carry
the ``storage.`` prefix Spark's options and Quiver's messages use
(``storage.aws_endpoint`` is ``aws_endpoint``). An endpoint (``aws_endpoint``, the
metadata endpoint..., or the environment variable that sets it) must be an
``http://`` or ``https://`` URL with a host: :meth:`StorageOptions.check_endpoints`
refuses anything else before the client sees it (obstore 0.12 panics on some).

What the environment sets (``AWS_ALLOW_HTTP``, ``AWS_ENDPOINT``...) applies unless an
option sets the same key: obstore reads the environment for configuration keys and
lets options override them, but takes its HTTP client settings either from the
environment or, once any client option is given, from the options alone;
:meth:`StorageOptions.split` therefore hands it the environment's client keys
under the options' own.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from ..errors import ConfigError, InvalidEndpointError, UnknownStorageOptionError
from ..option_table import STORAGE_OPTION
from ..urls import family_schemes, object_family

_PREFIX = {"s3": "aws_", "gcs": "google_", "azure": "azure_"}
STORAGE_PREFIX = "storage."
"""How Spark's options and Quiver's messages spell a storage option (``storage.<key>``)."""

_S3 = """access_key_id aws_access_key_id aws_bucket aws_bucket_name aws_checksum_algorithm
aws_conditional_put aws_container_authorization_token_file
aws_container_credentials_full_uri aws_container_credentials_relative_uri
aws_copy_if_not_exists aws_default_region aws_disable_bulk_delete aws_disable_tagging
aws_endpoint aws_endpoint_url aws_imdsv1_fallback aws_metadata_endpoint aws_region
aws_request_payer aws_role_arn aws_role_session_name aws_s3_express
aws_secret_access_key aws_server_side_encryption aws_session_token aws_skip_signature
aws_sse_bucket_key_enabled aws_sse_customer_key_base64 aws_sse_kms_key_id aws_token
aws_unsigned_payload aws_virtual_hosted_style_request aws_web_identity_token_file bucket
bucket_name checksum_algorithm conditional_put container_authorization_token_file
container_credentials_full_uri container_credentials_relative_uri copy_if_not_exists
default_region disable_bulk_delete disable_tagging endpoint endpoint_url imdsv1_fallback
metadata_endpoint region request_payer role_arn role_session_name s3_express
secret_access_key server_side_encryption session_token skip_signature
sse_bucket_key_enabled sse_customer_key_base64 sse_kms_key_id token unsigned_payload
virtual_hosted_style_request web_identity_token_file"""
_GCS = """application_credentials base_url bearer_token bucket bucket_name
google_application_credentials google_base_url google_bearer_token google_bucket
google_bucket_name google_service_account google_service_account_key
google_service_account_path google_skip_signature service_account service_account_key
service_account_path skip_signature"""
_AZURE = """access_key account_key account_name authority_host azure_authority_host azure_client_id
azure_client_secret azure_container_name azure_credential_type azure_disable_tagging
azure_endpoint azure_fabric_cluster_identifier azure_fabric_session_token
azure_fabric_token_service_url azure_fabric_workload_host azure_federated_token_file
azure_msi_endpoint azure_msi_resource_id azure_object_id azure_skip_signature
azure_storage_account_key azure_storage_account_name azure_storage_client_id
azure_storage_endpoint azure_storage_sas_key azure_storage_sas_token azure_storage_token
azure_storage_use_emulator azure_tenant_id azure_use_azure_cli azure_use_fabric_endpoint
client_id client_secret container_name credential_type disable_tagging encryption_key
endpoint fabric_cluster_identifier fabric_session_token fabric_token_service_url
fabric_workload_host federated_token_file master_key msi_endpoint msi_resource_id
object_id sas_key sas_token skip_signature tenant_id token use_azure_cli use_emulator
use_fabric_endpoint"""
_CLIENT = """allow_http allow_invalid_certificates connect_timeout default_content_type
http1_only http2_keep_alive_interval http2_keep_alive_timeout http2_keep_alive_while_idle
http2_only pool_idle_timeout pool_max_idle_per_host proxy_ca_certificate proxy_excludes
proxy_url randomize_addresses read_timeout root_certificate timeout user_agent"""


CONFIG_KEYS: dict[str, frozenset[str]] = {
    "s3": frozenset(_S3.split()),
    "gcs": frozenset(_GCS.split()),
    "azure": frozenset(_AZURE.split()),
}
"""The store configuration keys obstore 0.12 accepts per family, aliases included
(each one checked against obstore: a key outside these is refused by it too)."""

CLIENT_KEYS = frozenset(_CLIENT.split())
"""HTTP client keys; given with or without the family prefix (``aws_allow_http``)."""

QUIVER_KEYS: dict[str, str] = {
    o.name.removeprefix("storage."): o.name for o in STORAGE_OPTION.values()
}
"""Storage option keys Quiver reads itself (``retry_timeout``) -> the documented name
(``storage.retry_timeout``); they never reach obstore."""

ANY_ROOT_KEYS: frozenset[str] = frozenset().union(
    *CONFIG_KEYS.values(),
    CLIENT_KEYS,
    (f"{prefix}{key}" for prefix in _PREFIX.values() for key in CLIENT_KEYS),
    QUIVER_KEYS,
)
"""Every key some object root's client takes (a store profile names no root: its
``storage:`` keys are checked against these, and against the root's own when opened)."""


def near_storage_keys(key: str) -> str:
    """`` (did you mean 'x' or 'y'?)`` naming the storage keys of any root close to
    ``key``, else ``""``."""
    near = difflib.get_close_matches(key.lower(), sorted(ANY_ROOT_KEYS), n=2, cutoff=0.7)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


ENDPOINT_KEYS: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = {
    "s3": (
        (("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"),
         ("AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")),
        (("aws_metadata_endpoint", "metadata_endpoint"), ("AWS_METADATA_ENDPOINT",)),
    ),
    "gcs": ((("google_base_url", "base_url"), ("GOOGLE_BASE_URL",)),),
    "azure": (
        (("azure_endpoint", "endpoint"), ("AZURE_ENDPOINT", "AZURE_STORAGE_ENDPOINT")),
        (("azure_authority_host", "authority_host"), ("AZURE_AUTHORITY_HOST",)),
        (("azure_msi_endpoint", "msi_endpoint"), ("AZURE_MSI_ENDPOINT",)),
    ),
}  # fmt: skip
"""Per family, the settings that name an endpoint: each group's option keys (aliases of
one setting) and the environment variables obstore reads for it when no option sets it."""

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+")


def endpoint_problem(value: str) -> str | None:
    """What makes ``value`` unusable as an endpoint URL, or None when it is one:
    ``http://`` or ``https://``, a host name or IP address, an optional port."""
    if not value.strip():
        return "it is empty"
    if any(c.isspace() for c in value):
        return "it contains whitespace"
    m = _SCHEME_RE.match(value)
    if m is None:
        return "it has no scheme (http:// or https://)"
    if m.group(1).lower() not in ("http", "https"):
        return f"its scheme {m.group(1)}:// is neither http:// nor https://"
    parts = urlsplit(value)
    host = parts.hostname
    if not host:
        return "it has no host"
    if not _HOST_RE.fullmatch(host):
        return f"its host {host!r} is not a host name or IP address"
    try:
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    if parts.query or parts.fragment:
        return "it has a query or a fragment"
    return None


_SECRET_RE = re.compile(
    r"secret|password|passwd|token|sas|credential|private|session|signature|_key$|^key$|_key_base64",
)
_IDENTIFIER_RE = re.compile(r"key_id$")
_URL_USERINFO_RE = re.compile(r"(?<=://)[^/@\s]+@")


def is_secret_key(key: str) -> bool:
    """Whether the value of option ``key`` is a secret (shown as ``***``)."""
    k = key.lower()
    return not _IDENTIFIER_RE.search(k) and bool(_SECRET_RE.search(k))


def partial_id(value: str) -> str:
    """An access key id as it may be shown: ``AKIA...MPLE`` (``***`` when short)."""
    return f"{value[:4]}...{value[-4:]}" if len(value) >= 12 else "***"


def redact(options: Mapping[str, object] | None) -> dict[str, str]:
    """``options`` as they may be shown: secrets as ``***``, key ids partially
    (``AKIA...MPLE``), credentials inside URLs removed."""
    out: dict[str, str] = {}
    for k, v in (options or {}).items():
        text = _text(v)
        if is_secret_key(k):
            out[k] = "***"
        elif _IDENTIFIER_RE.search(k.lower()):
            out[k] = partial_id(text)
        else:
            out[k] = _URL_USERINFO_RE.sub("***@", text)
    return out


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class StorageOptions(Mapping[str, str]):
    """Storage options (keys lower-cased, values as strings) whose ``repr`` and ``str``
    never show a secret; :meth:`scrub` removes their secret values from any text."""

    def __init__(self, options: Mapping[str, object] | None = None) -> None:
        self._d = {
            str(k).strip().lower().removeprefix(STORAGE_PREFIX): _text(v)
            for k, v in (options or {}).items()
        }

    def __getitem__(self, key: str) -> str:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"StorageOptions({redact(self._d)!r})"

    __str__ = __repr__

    def secrets(self) -> list[str]:
        """The values a message must never contain (longest first)."""
        values = [v for k, v in self._d.items() if is_secret_key(k) or _IDENTIFIER_RE.search(k)]
        return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***`` and URL userinfo removed."""
        for v in self.secrets():
            text = text.replace(v, "***")
        return _URL_USERINFO_RE.sub("***@", text)

    @property
    def retry_timeout_s(self) -> float:
        """``retry_timeout`` parsed (seconds), its default when not given."""
        name = QUIVER_KEYS["retry_timeout"]
        return float(STORAGE_OPTION[name].value(self._d.get("retry_timeout"), name))

    def setting(
        self,
        keys: tuple[str, ...],
        env: tuple[str, ...] = (),
        environ: Mapping[str, str] | None = None,
    ) -> tuple[str, str] | None:
        """``(where, value)`` of the first of ``keys`` the options set (``where``:
        ``storage.<key>``), else of the first of the environment variables ``env``
        (``where``: its name), else None."""
        for k in keys:
            if k in self._d:
                return f"{STORAGE_PREFIX}{k}", self._d[k]
        source = os.environ if environ is None else environ
        for name in env:
            if name in source:
                return name, source[name]
        return None

    def check_endpoints(
        self, url: str, family: str, environ: Mapping[str, str] | None = None
    ) -> None:
        """Refuse, before anything is contacted, an endpoint setting of ``family`` (an
        option, or the environment variable obstore reads when no option sets it) that
        is not an ``http://`` or ``https://`` URL with a host
        (:class:`~quiver_spark.errors.InvalidEndpointError` naming it); ``url``: the root
        as shown."""
        for keys, env in ENDPOINT_KEYS.get(family, ()):
            found = self.setting(keys, env, environ)
            if found is None:
                continue
            where, value = found
            problem = endpoint_problem(value)
            if problem is not None:
                raise InvalidEndpointError(
                    url, setting=where, value=self.scrub(value), reason=problem
                )

    def split(
        self,
        family: str,
        environ: Mapping[str, str] | None = None,
        *,
        client_defaults: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], dict[str, str]]:
        """``(config, client_options)`` for obstore: client keys lose the family prefix
        (obstore 0.12 aborts the process-level call with a panic when one reaches
        ``config``), and the client keys ``environ`` (``os.environ``) sets as
        ``AWS_<KEY>`` / ``GOOGLE_<KEY>`` / ``AZURE_<KEY>`` are kept under the options' own
        (module docstring), ``client_defaults`` under both; Quiver's own keys are left
        out. Raises :class:`ConfigError` for a key the family does not know, or a value
        of Quiver's own keys it refuses."""
        config: dict[str, str] = {}
        client: dict[str, str] = {}
        prefix = _PREFIX.get(family, "")
        known = CONFIG_KEYS.get(family, frozenset())
        self.retry_timeout_s  # noqa: B018 - a bad value is refused here, at open
        for k, v in self._d.items():
            bare = k.removeprefix(prefix) if prefix else k
            if k in QUIVER_KEYS:
                continue
            if bare in CLIENT_KEYS:
                client[bare] = v
            elif k in known:
                config[k] = v
            else:
                raise UnknownStorageOptionError(k, _allowed_hint(family, k))
        if (client or client_defaults) and prefix:
            env = os.environ if environ is None else environ
            upper = prefix.upper()
            inherited = {
                name[len(upper) :].lower(): value
                for name, value in env.items()
                if name.startswith(upper) and name[len(upper) :].lower() in CLIENT_KEYS
            }
            client = {**(client_defaults or {}), **inherited, **client}
        return config, client


def _allowed_hint(family: str, key: str) -> str:
    if family == "memory":
        return "no storage options for memory:// roots"
    known = sorted(CONFIG_KEYS.get(family, frozenset()) | CLIENT_KEYS | set(QUIVER_KEYS))
    near = difflib.get_close_matches(key, known, n=3, cutoff=0.7)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    return f"a storage option of {family_schemes(family)} URLs (obstore's configuration keys){hint}"


def check_storage_options(url: str, storage_options: Mapping[str, object] | None) -> StorageOptions:
    """The options of root ``url`` as :class:`StorageOptions`, every key checked
    against the client ``url`` uses (nothing is contacted)."""
    opts = StorageOptions(storage_options)
    family = object_family(url)
    if family is None:
        return opts
    if family == "memory":
        if opts:
            raise ConfigError("storage_options", next(iter(opts)), _allowed_hint(family, ""))
        return opts
    opts.split(family)
    opts.check_endpoints(StorageOptions().scrub(url), family)
    return opts
