"""A head share (``catchUpHeadShare``, ``Subscription(head_share=)``) only means
something newest first (ARCHITECTURE.md §19): one given with the oldest-first order
(named or the default) is refused in one line naming both settings and what is
allowed, instead of being accepted and ignored. A share left out is never an error;
a bad share is refused as a bad value first, whatever the order."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import ConfigError
from quiver_spark.spark.source_options import parse_source_options
from quiver_spark.subscription import CatchUpOrder, Subscription
from quiver_spark.subscription.catchup import DEFAULT_HEAD_SHARE
from tests.stores import HAND_SEALED


def _base(tmp_path: Path) -> dict[str, str]:
    return {"path": str(tmp_path), "subscriber": "s"}


def test_a_stream_refuses_catch_up_head_share_with_catch_up_order_oldest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options(
            {**_base(tmp_path), "catchUpOrder": "oldest", "catchUpHeadShare": "0.5"},
            streaming=True,
        )
    assert str(err.value) == (
        "catchUpHeadShare applies only with catchUpOrder=newest; got catchUpHeadShare=0.5 "
        "with catchUpOrder=oldest (set catchUpOrder=newest, or leave catchUpHeadShare out)"
    )
    assert err.value.option == "catchUpHeadShare" and err.value.value == "0.5"


def test_the_default_order_counts_as_oldest_and_an_explicit_default_share_too(
    tmp_path: Path,
) -> None:
    for share in ("0.5", str(DEFAULT_HEAD_SHARE), "1"):
        with pytest.raises(ConfigError, match="applies only with catchUpOrder=newest") as err:
            parse_source_options({**_base(tmp_path), "catchUpHeadShare": share}, streaming=True)
        assert f"got catchUpHeadShare={share} with catchUpOrder=oldest" in str(err.value)


def test_a_bad_share_is_refused_as_a_bad_value_whatever_the_order(tmp_path: Path) -> None:
    for order in ("oldest", "newest"):
        with pytest.raises(ConfigError, match="greater than 0 and at most 1"):
            parse_source_options(
                {**_base(tmp_path), "catchUpOrder": order, "catchUpHeadShare": "2"},
                streaming=True,
            )


def test_a_stream_takes_a_share_newest_first_and_none_oldest_first(tmp_path: Path) -> None:
    newest = parse_source_options(
        {**_base(tmp_path), "catchUpOrder": "newest", "catchUpHeadShare": "0.5"}, streaming=True
    )
    assert newest.catch_up_order is CatchUpOrder.NEWEST and newest.head_share == 0.5
    oldest = parse_source_options({**_base(tmp_path), "catchUpOrder": "oldest"}, streaming=True)
    assert oldest.catch_up_order is CatchUpOrder.OLDEST and oldest.head_share is None
    plain = parse_source_options(_base(tmp_path), streaming=True)
    assert plain.catch_up_order is CatchUpOrder.OLDEST and plain.head_share is None
    # an empty value counts as absent, as for every other option
    blank = parse_source_options({**_base(tmp_path), "catchUpHeadShare": " "}, streaming=True)
    assert blank.head_share is None


def test_a_subscription_refuses_a_head_share_with_order_oldest_before_it_claims(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    QuiverStore.open(root, HAND_SEALED, partition="p-0", background=False).close()
    for order in ("oldest", CatchUpOrder.OLDEST):
        with pytest.raises(ConfigError) as err:
            Subscription.open(root, "s", order=order, head_share=0.5)
        assert str(err.value) == (
            "head_share applies only with order=newest; got head_share=0.5 with "
            "order=oldest (set order=newest, or leave head_share out)"
        )
    with pytest.raises(ConfigError, match="head_share applies only with order=newest"):
        Subscription.open(root, "s", head_share=DEFAULT_HEAD_SHARE)
    # refused before it claimed the subscriber: the next consumer opens at once
    with Subscription.open(root, "s") as sub:
        assert sub.order is CatchUpOrder.OLDEST and sub.head_share == DEFAULT_HEAD_SHARE
    with Subscription.open(root, "s", order="newest") as sub:
        assert sub.head_share == DEFAULT_HEAD_SHARE
    with Subscription.open(root, "s", order="newest", head_share=0.5) as sub:
        assert sub.head_share == 0.5
