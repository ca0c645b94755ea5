"""Result ids: "<pk>-<token in hex>", or the bare primary key of a row stored before tokens."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from django_outbox.db import dialect
from django_outbox.lib.resultids import (
    PK_MAX,
    TOKEN_MAX,
    ResultId,
    new_token,
    new_tokens,
    parse_result_id,
    result_id,
)


@given(pk=st.integers(1, PK_MAX), token=st.integers(0, TOKEN_MAX))
def test_every_id_written_reads_back_as_its_key_and_token(pk, token):
    assert parse_result_id(result_id(pk, token)) == ResultId(pk, token)


def test_the_forms():
    assert result_id(42, 0x5F3A9C1) == "42-5f3a9c1"
    assert result_id(42, 0) == "42"  # a row stored before tokens existed
    assert parse_result_id(f"{PK_MAX}-7fffffff") == (PK_MAX, TOKEN_MAX)


def test_new_tokens_are_never_0_and_fit_a_32_bit_column():
    tokens = {new_token() for _ in range(2000)}
    assert min(tokens) >= 1 and max(tokens) <= TOKEN_MAX
    assert len(tokens) > 1990


def test_tokens_drawn_at_once_are_as_many_as_asked_and_in_the_same_range():
    drawn = new_tokens(20_000)
    assert len(drawn) == 20_000 and len(set(drawn)) > 19_900
    assert min(drawn) >= 1 and max(drawn) <= TOKEN_MAX
    # Spread over the whole range, high bit included: about half of them above the middle.
    assert 9_000 < sum(token > TOKEN_MAX // 2 for token in drawn) < 11_000
    assert new_tokens(0) == []


@pytest.mark.django_db
def test_tokens_drawn_in_sql_are_in_the_same_range():
    with connection.cursor() as cursor:
        tokens = set()
        for _ in range(200):
            cursor.execute(f"SELECT {dialect(connection.alias).random_token(TOKEN_MAX)}", [])
            tokens.add(cursor.fetchone()[0])
    assert all(isinstance(t, int) and 1 <= t <= TOKEN_MAX for t in tokens)
    assert len(tokens) > 190
