"""The store owns its policy: recorded at creation, changed only explicitly."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.config import SizeCapPolicy
from quiver_spark.errors import ConfigError, PolicyConflictError
from quiver_spark.options import store_config_from_options
from quiver_spark.policy import POLICY_FILE
from tests.child import run_python

CAPPED = {"retention.size_cap": "1GB", "retention.size_cap_policy": "DROP_OLDEST"}


def opened(root: Path, **options: str) -> QuiverStore:
    return QuiverStore.open(
        str(root), store_config_from_options(options), partition=None, background=False
    )


def test_the_first_openers_policy_is_recorded_and_applies_without_options(tmp_path: Path) -> None:
    with opened(tmp_path, **CAPPED) as s:
        assert s.policy.generation == 1
    assert (tmp_path / POLICY_FILE).exists()
    with opened(tmp_path) as s:  # no option at all: the store's policy applies
        assert s.config.retention.size_cap_bytes == 1024**3
        assert s.config.retention.size_cap_policy is SizeCapPolicy.DROP_OLDEST
        assert s.policy.shown("retention.size_cap") == "1GB"


def test_an_explicit_option_contradicting_the_policy_is_refused(tmp_path: Path) -> None:
    opened(tmp_path, **CAPPED).close()
    with pytest.raises(PolicyConflictError) as err:
        opened(tmp_path, **{"retention.size_cap": "2GB"})
    msg = str(err.value)
    assert "retention.size_cap" in msg and "2GB" in msg and "1GB" in msg
    assert f"quiver config {tmp_path} set retention.size_cap=" in msg
    # explicitly giving the default contradicts a recorded drop_oldest too
    with pytest.raises(PolicyConflictError, match="size_cap_policy"):
        opened(tmp_path, **{"retention.size_cap_policy": "backpressure"})
    # the same values, however spelled, are fine
    opened(tmp_path, **{"retention.size_cap": "1024MB", "retention.size_cap_policy": "drop_oldest"}).close()


def test_a_config_built_in_code_is_checked_by_its_non_default_values(tmp_path: Path) -> None:
    opened(tmp_path, **CAPPED).close()
    from quiver_spark.config import RetentionConfig

    cfg = StoreConfig(retention=RetentionConfig(size_cap_bytes=5 * 1024**3))
    with pytest.raises(PolicyConflictError, match="5GB"):
        QuiverStore.open(str(tmp_path), cfg, partition=None, background=False)
    with QuiverStore.open(str(tmp_path), StoreConfig(), partition=None, background=False) as s:
        assert s.config.retention.size_cap_bytes == 1024**3


def test_a_policy_change_is_conditional_and_reaches_other_handles(tmp_path: Path) -> None:
    with opened(tmp_path, **CAPPED) as a, opened(tmp_path) as b:
        new = a.set_policy({"retention.size_cap": 2 * 1024**3}, expected_generation=1)
        assert new.generation == 2 and a.config.retention.size_cap_bytes == 2 * 1024**3
        with pytest.raises(PolicyConflictError, match="generation 2"):
            b.set_policy({"retention.size_cap": 3 * 1024**3}, expected_generation=1)
        b.run_retention()  # the other handle applies the change from its next pass on
        assert b.config.retention.size_cap_bytes == 2 * 1024**3
        with pytest.raises(ConfigError, match=r"segment\.target_size"):
            a.set_policy({"segment.target_size": 1})


def test_a_policy_change_reaches_a_writer_in_another_process(tmp_path: Path) -> None:
    opened(tmp_path, **CAPPED).close()
    code = f"""
        from quiver_spark import QuiverStore, StoreConfig
        s = QuiverStore.open({str(tmp_path)!r}, StoreConfig(), partition=None, background=False)
        s.set_policy({{"retention.size_cap_policy": __import__("quiver_spark.config").config.SizeCapPolicy.BACKPRESSURE}})
        """
    with opened(tmp_path) as s:
        assert s.config.retention.size_cap_policy is SizeCapPolicy.DROP_OLDEST
        run_python(code)
        s.run_retention()
        assert s.config.retention.size_cap_policy is SizeCapPolicy.BACKPRESSURE


def test_the_wal_root_is_recorded_and_found_without_the_option(tmp_path: Path) -> None:
    root, wal = tmp_path / "root", tmp_path / "local-wal"
    cfg = store_config_from_options({"wal.path": str(wal), "segment.max_open_duration": "60s"})
    with QuiverStore.open(str(root), cfg, partition="p-0", background=False) as s:
        s.append(pa.record_batch({"x": [1, 2, 3]}))
        s.flush()
        s.writer.close(finalize=False)  # type: ignore[union-attr]  # rows stay in the WAL
    with opened(root) as h:  # no wal.path: the recorded one
        assert h.wal_root == str(wal)
        assert h.wal_bytes()["p-0"] > 0
        assert [p for p, _ in h.finalize_idle_partitions()] == ["p-0"]
    with pytest.raises(ConfigError, match=r"wal\.path") as err:
        opened(root, **{"wal.path": str(tmp_path / "other")})
    assert str(wal) in str(err.value)


def test_subscriber_expiry_takes_durations_with_units(tmp_path: Path) -> None:
    with opened(tmp_path, **{"subscriber.expire_after": "3d"}) as s:
        assert s.policy.expire_after_s == 3 * 86400
        assert s.policy.shown("subscriber.expire_after") == "3d"
    with pytest.raises(ConfigError, match=r"subscriber\.expire_after"):
        store_config_from_options({"subscriber.expire_after": "soon"})
