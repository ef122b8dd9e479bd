"""Quantities in their canonical form, as k8s.io/apimachinery/pkg/api/resource writes them.

The table is the inputs of quantity_test.go (TestQuantityParse, its invalid texts, TestQuantityString's
canonical and alternate forms, TestQuantityParseEmit, TestJSONWhitespace) and a few more, each with what
``json.Marshal`` of the ``Quantity`` that ``json.Unmarshal`` made of it writes (run against apimachinery
v0.37.2); None where it refuses the text."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.sim.api import quantity
from gpuplan.sim.controllers import resources

GO_CANONICAL: list[tuple[str, str | None]] = [
    ("0", "0"),
    ("0n", "0"),
    ("0u", "0"),
    ("0m", "0"),
    ("0Ki", "0"),
    ("0k", "0"),
    ("0Mi", "0"),
    ("0M", "0"),
    ("0Gi", "0"),
    ("0G", "0"),
    ("0Ti", "0"),
    ("0T", "0"),
    ("1", "1"),
    ("-1", "-1"),
    ("+1", "+1"),
    ("1Ki", "1Ki"),
    ("-1Ki", "-1Ki"),
    ("+1Ki", "+1Ki"),
    ("8Ki", "8Ki"),
    ("7Mi", "7Mi"),
    ("6Gi", "6Gi"),
    ("5Ti", "5Ti"),
    ("4Pi", "4Pi"),
    ("3Ei", "3Ei"),
    ("10Ti", "10Ti"),
    ("100Ti", "100Ti"),
    ("5n", "5n"),
    ("4u", "4u"),
    ("3m", "3m"),
    ("9", "9"),
    ("8k", "8k"),
    ("50k", "50k"),
    ("7M", "7M"),
    ("6G", "6G"),
    ("5T", "5T"),
    ("40T", "40T"),
    ("300T", "300T"),
    ("2P", "2P"),
    ("1E", "1E"),
    ("1E-3", "1E-3"),
    ("1e3", "1e3"),
    ("-1e3", "-1e3"),
    ("+1e3", "+1e3"),
    ("1E6", "1E6"),
    ("1e9", "1e9"),
    ("1E12", "1E12"),
    ("1e15", "1e15"),
    ("1E18", "1E18"),
    ("1e14", "100e12"),
    ("1e13", "10e12"),
    ("100.035k", "100.035k"),
    ("0.001", "1m"),
    ("0.0005k", "500m"),
    ("0.005", "5m"),
    ("0.05", "50m"),
    ("0.5", "500m"),
    ("-0.5", "-500m"),
    ("+0.5", "500m"),
    ("0.00050k", "500m"),
    ("0.00500", "5m"),
    ("0.05000", "50m"),
    ("0.50000", "500m"),
    ("0.5e0", "500e-3"),
    ("0.5e-1", "50e-3"),
    ("0.5e-2", "5e-3"),
    ("10.035M", "10.035M"),
    ("1.2e3", "1200"),
    ("1.3E+6", "1300e3"),
    ("1.40e9", "1400e6"),
    ("1.53E12", "1530e9"),
    ("1.6e15", "1600e12"),
    ("1.7E18", "1700e15"),
    ("9.01", "9010m"),
    ("8.1k", "8100"),
    ("7.123456M", "7.123456M"),
    ("6.987654321G", "6.987654321G"),
    ("5.444T", "5.444T"),
    ("40.1T", "40100G"),
    ("300.2T", "300200G"),
    ("2.5P", "2500T"),
    ("1.01E", "1010P"),
    ("3.001n", "4n"),
    ("-3.001n", "-4n"),
    ("+3.001n", "4n"),
    ("1.1E-9", "2e-9"),
    ("0.0000000001", "1n"),
    ("0.0000000005", "1n"),
    ("0.00000000050", "1n"),
    ("0.5e-9", "1e-9"),
    ("0.9n", "1n"),
    ("0.00000012345", "124n"),
    ("0.00000012354", "124n"),
    ("9Ei", "9223372036854775807"),
    ("-9Ei", "-9223372036854775807"),
    ("+9Ei", "9223372036854775807"),
    ("9223372036854775807Ki", "9223372036854775807"),
    ("12E", "12E"),
    ("100.035Ki", "102435840m"),
    ("-100.035Ki", "-102435840m"),
    ("+100.035Ki", "102435840m"),
    ("0.5Mi", "512Ki"),
    ("0.05Gi", "53687091200m"),
    ("0.025Ti", "27487790694400m"),
    ("0.000000000001Ki", "2n"),
    ("-0.000000000001Ki", "-2n"),
    ("+0.000000000001Ki", "2n"),
    (".001", "1m"),
    (".0001k", "100m"),
    ("1.", "1."),
    ("1.G", "1.G"),
    ("1.1.M", None),
    ("1+1.0M", None),
    ("0.1mi", None),
    ("0.1am", None),
    ("aoeu", None),
    (".5i", None),
    ("1i", None),
    (" 1", "1"),
    ("1 ", "1"),
    ("1Mi", "1Mi"),
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    ("1G", "1G"),
    (".001Ki", "1024m"),
    ("1024m", "1024m"),
    (".000001Ki", "1024u"),
    ("1024u", "1024u"),
    (".000000001Ki", "1024n"),
    ("1024n", "1024n"),
    (".000000000001Ki", "2n"),
    ("2n", "2n"),
    ("0.1", "100m"),
    ("2e9", "2e9"),
    ("1.5Gi", "1536Mi"),
    ("-1.5Gi", "-1536Mi"),
    ("+1.5Gi", "1536Mi"),
    ("1000m", "1"),
    ("-+1", None),
    ("++1", None),
    ("01", "01"),
    ("-01", "-01"),
    ("+01", "+01"),
    ("1000E", "1"),
    ("1e21", "1e21"),
    ("0.5Gi", "512Mi"),
    ("1.5", "1500m"),
    ("1536Mi", "1536Mi"),
    ("2048Ki", "2Mi"),
    ("1023", "1023"),
    ("1024", "1024"),
    ("0.0", "0"),
    ("500m", "500m"),
    ("250m", "250m"),
    ("8Gi", "8Gi"),
    ("16", "16"),
    ("64Gi", "64Gi"),
    ("65536Ki", "64Mi"),
    ("131072Mi", "128Gi"),
    ("1.5e3", "1500"),
    ("15e2", "1500"),
    ("1500", "1500"),
    ("1.5k", "1500"),
    ("12e6", "12e6"),
    ("0.000000001", "1n"),
    ("1E+3", "1E+3"),
    ("1e-3", "1e-3"),
    ("8Ei", "9223372036854775807"),
    ("9223372036854775807", "9223372036854775807"),
    ("9223372036854775808", "9223372036854775808"),
    ("99999999999999999999", "99999999999999999999"),
    (".5", "500m"),
    (".5Gi", "512Mi"),
    ("0.25Ki", "256"),
    (" 1", "1"),
    ("1 ", "1"),
]


@pytest.mark.parametrize(("text", "expected"), GO_CANONICAL)
def test_the_canonical_form_is_apimachinerys(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(quantity.QuantityError):
            quantity.canonical(text)
    else:
        assert quantity.canonical(text) == expected


@pytest.mark.parametrize(("number", "expected"), [(1, "1"), (0.5, "500m"), (-1, "-1"), (0.1, "100m")])
def test_a_json_number_is_read_as_its_text(number: float, expected: str) -> None:
    assert quantity.canonical(number) == expected


@pytest.mark.parametrize("value", [True, None, {}, []])
def test_what_is_no_quantity_is_refused(value: object) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.canonical(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Decimal("0.1")),
        ("1.5Gi", Decimal(1536 * 1024 * 1024)),
        ("2e9", Decimal(2 * 10**9)),
        ("9Ei", Decimal(2**63 - 1)),
        ("3.001n", Decimal("4e-9")),
        ("x", Decimal(0)),
    ],
)
def test_the_scheduler_reads_the_same_values(text: str, value: Decimal) -> None:
    assert quantity.value_of(text) == value
    assert resources.quantity(text) == value
