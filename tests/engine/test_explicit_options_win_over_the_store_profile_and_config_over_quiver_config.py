"""The one order of precedence of a setting (``quiver_spark.options.merged_options``,
which the Spark data source and every ``quiver`` command apply): an explicit option,
then the store profile named by option ``config`` (``--config``), else the one named by
the environment variable ``QUIVER_CONFIG``, then (when the root is opened) the
environment the object store client reads.

A profile's ``storage:`` section is read nested or flat; a storage key no object store
client takes is refused naming the file, what named it and the near miss, and no value
the file holds appears in any error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError, StoreProfileError
from quiver_spark.options import QUIVER_CONFIG, merged_options, store_config_from_options

SECRET = "profile-secret-never-shown-0123"


def profile(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_explicit_options_win_over_the_profile_named_by_config(tmp_path: Path) -> None:
    cfg = profile(
        tmp_path,
        "q.yaml",
        "segment:\n  target_size: 8MB\nstorage:\n  aws_endpoint: http://from-file:9000\n"
        "  aws_region: eu-west-1\n",
    )
    got = merged_options(
        {"config": cfg, "Segment.Target_Size": "1MB", "storage.aws_endpoint": "http://x:1"},
        environ={},
    )
    assert got == {
        "Segment.Target_Size": "1MB",
        "storage.aws_endpoint": "http://x:1",
        "storage.aws_region": "eu-west-1",
    }
    assert store_config_from_options(got).segment.target_size_bytes == 1024 * 1024


def test_quiver_config_is_read_only_when_no_config_is_given(tmp_path: Path) -> None:
    env_file = profile(tmp_path, "env.yaml", "storage:\n  aws_region: us-west-2\n  timeout: 5s\n")
    cfg = profile(tmp_path, "q.yaml", "storage:\n  aws_region: eu-west-1\n")
    environ = {QUIVER_CONFIG: env_file}
    assert merged_options({}, environ) == {
        "storage.aws_region": "us-west-2",
        "storage.timeout": "5s",
    }
    # the file named by config replaces QUIVER_CONFIG's whole: nothing of it is merged in
    assert merged_options({"config": cfg}, environ) == {"storage.aws_region": "eu-west-1"}
    assert merged_options({"storage.region": "ap-south-1"}, environ) == {
        "storage.timeout": "5s",
        "storage.region": "ap-south-1",
    }
    assert merged_options({"a": "b"}, {}) == {"a": "b"}
    assert merged_options({"a": "b"}, {QUIVER_CONFIG: "  "}) == {"a": "b"}  # blank: unset


def test_the_storage_section_is_read_nested_or_flat_with_yaml_scalars_as_options_spell_them(
    tmp_path: Path,
) -> None:
    nested = profile(
        tmp_path,
        "nested.yaml",
        "storage:\n  aws_allow_http: true\n  retry_timeout: 5s\n  aws_session_token:\n",
    )
    flat = profile(
        tmp_path, "flat.yaml", "storage.aws_allow_http: true\nstorage.retry_timeout: 5s\n"
    )
    want = {"storage.aws_allow_http": "true", "storage.retry_timeout": "5s"}
    assert merged_options({"config": nested}, {}) == want  # a null key is not set
    assert merged_options({"config": flat}, {}) == want


def test_an_explicit_storage_key_replaces_the_profiles_under_any_spelling(tmp_path: Path) -> None:
    cfg = profile(
        tmp_path,
        "q.yaml",
        "storage:\n  AWS_ALLOW_HTTP: true\n  aws_endpoint_url: http://file:1\n  bucket: b\n",
    )
    got = merged_options(
        {"config": cfg, "storage.allow_http": "false", "storage.endpoint": "http://mine:2"}, {}
    )
    assert got == {
        "storage.bucket": "b",
        "storage.allow_http": "false",
        "storage.endpoint": "http://mine:2",
    }


@pytest.mark.parametrize("named_by", ["config", "QUIVER_CONFIG"])
def test_a_misspelt_storage_key_names_the_file_what_named_it_and_the_near_miss(
    tmp_path: Path, named_by: str
) -> None:
    cfg = profile(
        tmp_path,
        "q.yaml",
        f"storage:\n  aws_endpiont: http://127.0.0.1:9000\n  aws_secret_acces_key: {SECRET}\n",
    )
    options = {"config": cfg} if named_by == "config" else {}
    with pytest.raises(StoreProfileError) as err:
        merged_options(options, {QUIVER_CONFIG: cfg})
    who = "option 'config'" if named_by == "config" else "the environment variable QUIVER_CONFIG"
    assert str(err.value).startswith(
        f"unknown storage key 'aws_endpiont' in the store profile '{cfg}' (named by {who}) "
        "(did you mean 'aws_endpoint'"
    ), err.value
    assert isinstance(err.value, ConfigError)
    secret_key = profile(tmp_path, "s.yaml", f"storage:\n  aws_secret_acces_key: {SECRET}\n")
    with pytest.raises(StoreProfileError) as err:  # a misspelt secret's key: no value shown
        merged_options({"config": secret_key}, {})
    assert "'aws_secret_acces_key'" in str(err.value)
    assert "did you mean 'aws_secret_access_key'" in str(err.value)
    assert SECRET not in str(err.value)


def test_a_quiver_config_naming_a_missing_file_is_one_line_naming_the_variable_and_path(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(StoreProfileError) as err:
        merged_options({"path": "/q"}, {QUIVER_CONFIG: missing})
    assert str(err.value) == (
        f"the environment variable QUIVER_CONFIG names '{missing}', which is not a readable "
        "YAML file (No such file or directory): set QUIVER_CONFIG to the path of a store "
        "profile (a YAML file in the layout of conf/quiver.yaml), or unset it"
    )
    with pytest.raises(ConfigError) as err:  # named by config: the option, as before
        merged_options({"config": missing}, {})
    assert err.value.option == "config"


def test_a_profile_that_is_not_yaml_is_named_without_quoting_its_text(tmp_path: Path) -> None:
    cfg = profile(tmp_path, "q.yaml", f"storage:\n  aws_secret_access_key: {SECRET}\n\tx: [\n")
    for options, environ in (({"config": cfg}, {}), ({}, {QUIVER_CONFIG: cfg})):
        with pytest.raises(ConfigError) as err:
            merged_options(options, environ)
        text = str(err.value)
        assert "valid YAML" in text and "line 3" in text, text
        assert SECRET not in text and "\n" not in text, text
    scalar = profile(tmp_path, "scalar.yaml", "storage: s3\n")
    with pytest.raises(StoreProfileError, match=r"'storage' in the store profile .* is not a map"):
        merged_options({"config": scalar}, {})


def test_a_misspelt_store_option_in_a_profile_names_the_profile_never_its_value(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text("retention:\n  size_kap: 1GB-secretish-value\n")
    with pytest.raises(ConfigError) as e:
        merged_options({"path": "/tmp/q"}, {"QUIVER_CONFIG": str(profile)})
    text = str(e.value)
    assert "retention.size_kap" in text and str(profile) in text and "QUIVER_CONFIG" in text
    assert "did you mean 'retention.size_cap'" in text
    assert "1GB-secretish-value" not in text
