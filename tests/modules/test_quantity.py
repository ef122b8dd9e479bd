"""The quantity grammar of k8s.io/apimachinery/pkg/api/resource/quantity.go (v0.37.2), from the cases of its
own quantity_test.go (TestQuantityParse), and the value the server stores."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.modules.quantity import MILLI, QUANTITY, quantity_value

# (text, the value ParseQuantity gives it): TestQuantityParse's table, and the forms the grammar names
VALID = [
    ("0", "0"),
    ("0n", "0"),
    ("0u", "0"),
    ("0Ki", "0"),
    ("0T", "0"),
    ("1", "1"),
    ("1Ki", "1024"),
    ("7Mi", str(7 * 2**20)),
    ("3Ei", str(3 * 2**60)),
    ("5n", "5e-9"),
    ("4u", "4e-6"),
    ("3m", "0.003"),
    ("50k", "50000"),
    ("6G", "6e9"),
    ("40T", "40e12"),
    ("2P", "2e15"),
    ("1E", "1e18"),
    ("1E-3", "0.001"),
    ("1e3", "1000"),
    ("1E6", "1e6"),
    ("1E18", "1e18"),
    ("100.035k", "100035"),
    ("0.0005k", "0.5"),
    ("0.5e-2", "0.005"),
    ("1.3E+6", "1300000"),
    ("1.01E", "1.01e18"),
    ("3.001n", "4e-9"),  # rounded up to 1n
    ("0.0000000001", "1e-9"),
    ("0.00000012345", "124e-9"),
    ("9Ei", str(2**63 - 1)),  # capped
    ("100.035Ki", "102435.84"),
    ("0.5Mi", "524288"),
    ("0.000000000001Ki", "2e-9"),
    (".001", "0.001"),
    ("1.", "1"),
    ("1.G", "1e9"),
    # the forms gpustack.yaml refused before
    ("2e9", "2e9"),
    ("1e-1", "0.1"),
    ("+1", "1"),
    (".5", "0.5"),
    ("5.", "5"),
    ("-1", "-1"),
    ("-3.5Gi", str(-3.5 * 2**30)),
]
INVALID = [
    # TestQuantityParse's invalid list
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    " 1",
    "1 ",
    # and what the scanner refuses besides
    "",
    "1e",  # a lone e is no suffix
    "1e1.5",  # an exponent is a whole number
    "1ki",
    "1K",
    "1KiB",
    "1Gb",
    "1e3k",
    "1\n",
    # no digits at all: the scanner reads these as 0, the grammar has no such number
    ".",
    "+",
    "-.",
]


@pytest.mark.parametrize(("text", "value"), VALID, ids=[text for text, _ in VALID])
def test_a_valid_quantity_has_the_value_the_server_parses(text: str, value: str) -> None:
    assert QUANTITY.fullmatch(text)
    assert quantity_value(text) == Decimal(value)


@pytest.mark.parametrize("text", INVALID, ids=[repr(text) for text in INVALID])
def test_an_invalid_quantity_is_refused(text: str) -> None:
    assert not QUANTITY.fullmatch(text)
    assert quantity_value(text) is None


def test_spellings_of_one_value_are_equal() -> None:
    """What the server stores for each (its canonical form) is the same number."""
    for spellings in (("0.1", "100m", "1e-1", ".1"), ("2e9", "2G", "2000M"), ("1.5Gi", "1536Mi")):
        assert len({quantity_value(text) for text in spellings}) == 1, spellings


def test_a_resource_list_rounds_up_to_a_milli() -> None:
    """SetDefaults_ResourceList: 0.1m is stored as 1m, -0.1m as -1m (away from zero)."""
    assert quantity_value("0.1m", step=MILLI) == Decimal("0.001") == quantity_value("1m", step=MILLI)
    assert quantity_value("1n", step=MILLI) == Decimal("0.001")
    assert quantity_value("-0.1m", step=MILLI) == Decimal("-0.001")
    assert quantity_value("1.5m", step=MILLI) == Decimal("0.002")
    assert quantity_value("0.1m") == Decimal("0.0001")


def test_a_yaml_number_counts_as_its_text() -> None:
    assert quantity_value(2) == 2
    assert quantity_value(0.5) == Decimal("0.5")
    assert quantity_value(True) is None
    assert quantity_value(None) is None
