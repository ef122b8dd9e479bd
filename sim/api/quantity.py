"""Resource quantities as k8s.io/apimachinery/pkg/api/resource parses and writes them.

A quantity the server decodes (``cpu: 0.1``, ``memory: 1.5Gi``) is stored and answered in its canonical form
(``100m``, ``1536Mi``), because the API server keeps a ``resource.Quantity`` and encodes it again. This is a
port of ``ParseQuantity`` and ``CanonicalizeBytes`` (quantity.go, amount.go, suffix.go), with its quirks:

- the format of the suffix is kept: binary (``Ki`` ... ``Ei``) stays binary while the value is a whole
  number of at least 1024, a decimal exponent (``2e9``) stays an exponent (``2e9``, never ``2G``), the rest
  is decimal SI;
- values are rounded up (away from zero) to nanos, binary values above 2^63-1 are capped;
- a text the parser's fast path finds already canonical is written back as it was sent (``+1``, ``01``);
- a decimal exponent with no SI suffix (``1000E`` is 10^21) loses its suffix, as the Go suffixer finds none.

Pure; used by ``sim.api.roundtrip`` and the scheduler's resource arithmetic
(``sim.controllers.resources``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_MAX_INT64 = (1 << 63) - 1
_MAX_INT64_FACTORS = 18  # math.go maxInt64Factors
_NANO = -9
_DECIMAL_SUFFIXES = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {exponent: text for text, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {exponent // 10: text for text, exponent in _BINARY_SUFFIXES.items()}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")


class QuantityError(ValueError):
    """A text ``ParseQuantity`` refuses."""


@dataclass(frozen=True)
class Quantity:
    """``unscaled * 10**exponent``, its format, and the text Go keeps as its canonical string (if any)."""

    unscaled: int
    exponent: int
    format: str
    text: str | None = None

    @property
    def value(self) -> Decimal:
        return Decimal(f"{self.unscaled}e{self.exponent}")  # exact, whatever the context's precision

    def __str__(self) -> str:
        return self.text if self.text is not None else _canonical(self)


def canonical(value: object) -> str:
    """The canonical text of a quantity sent as ``value`` (a JSON string or number); ``QuantityError``
    when it is none."""
    return _canonical_text(_json_text(value))


@functools.lru_cache(maxsize=4096)
def _canonical_text(text: str) -> str:
    # Every write of an object re-encodes its quantities, and a cluster's are a handful of texts.
    return str(parse(text))


def value_of(value: object) -> Decimal:
    """The number a quantity stands for; 0 for what is not one (the scheduler's reading)."""
    try:
        return parse(_json_text(value)).value
    except QuantityError:
        return Decimal(0)


def _json_text(value: object) -> str:
    """What ``UnmarshalJSON`` hands ``ParseQuantity``: a string or the number as written, trimmed."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"not a quantity: {value!r}")
    return (value if isinstance(value, str) else repr(value)).strip()


def parse(text: str) -> Quantity:
    """``ParseQuantity``."""
    if not text:
        raise QuantityError("quantities must match the regular expression")
    if text == "0":
        return Quantity(0, 0, DECIMAL_SI, "0")
    positive, value, num, denom, suffix = _split(text)
    base, exponent, form = _interpret(suffix)
    precision, scale, mantissa = 0, 0, 1
    if form == BINARY_SI:
        if exponent >= 0 and not denom:
            mantissa = 1 << exponent
            # 1Mi has about 6 decimal digits: exponent*3/10 - 1 approximates the digits the suffix uses.
            precision = 15 - len(num) - exponent * 3 // 10 - 1
        else:
            precision = -1
    else:
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            result = int(shifted) * mantissa
            if result <= _MAX_INT64:
                if not positive:
                    result = -result
                if form == BINARY_SI:
                    kept = exponent % 10 == 0 and int(shifted) & 0x07 != 0
                else:
                    kept = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(result, scale, form, text if kept else None)
    return _parse_slow(value, base, exponent, form)


def _parse_slow(value: str, base: int, exponent: int, form: str) -> Quantity:
    """The inf.Dec path: exact value, rounded up to nanos, binary capped at 2^63-1."""
    try:
        number = Decimal(value)
    except InvalidOperation as exc:
        raise QuantityError("unable to parse numeric part of quantity") from exc
    sign, digits, exp = number.as_tuple()
    if not isinstance(exp, int) or not digits:
        raise QuantityError("unable to parse numeric part of quantity")
    unscaled = int("".join(map(str, digits)))
    if base == 10:
        exp += exponent
    else:
        unscaled <<= exponent
    if unscaled and exp < _NANO:
        unscaled, remainder = divmod(unscaled, 10 ** (_NANO - exp))
        exp = _NANO
        if remainder:
            unscaled += 1  # inf.RoundUp on the magnitude
    if form == BINARY_SI and Decimal(f"{unscaled}e{exp}") > _MAX_INT64:
        unscaled, exp = _MAX_INT64, 0
    if form == BINARY_SI and unscaled and Decimal(f"{unscaled}e{exp}") < 1:
        form = DECIMAL_SI  # avoids rounding a fraction of a binary unit
    return Quantity(-unscaled if sign else unscaled, exp, form)


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, number text, numerator, denominator, suffix)."""
    positive, pos, end = True, 0, len(text)
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in "0123456789":
        pos += 1
    if pos < end:
        raise QuantityError("quantities must match the regular expression")
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a suffix (suffix.go ``interpret``)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body.isdigit() and body.isascii():
            return 10, int(digits), DECIMAL_EXPONENT
    raise QuantityError("unable to parse quantity's suffix")


def _canonical(q: Quantity) -> str:
    """``CanonicalizeBytes``: no fractional digits, the largest exponent (or suffix) without loss."""
    if q.unscaled == 0:
        return "0"
    form = q.format
    whole = 0
    if form == BINARY_SI:
        if -1024 < q.value < 1024:
            form = DECIMAL_SI
        else:
            whole, exact = _round_up_to_integer(q)
            if not exact:
                form = DECIMAL_SI
    if form == BINARY_SI:
        times = 0
        while abs(whole) >= 1024 and whole % 1024 == 0:
            whole //= 1024
            times += 1
        return f"{whole}{_BINARY_BY_EXPONENT.get(times, '')}"
    mantissa, exponent = q.unscaled, q.exponent
    while abs(mantissa) >= 10 and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if form == DECIMAL_EXPONENT:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_BY_EXPONENT.get(exponent, '')}"


def _round_up_to_integer(q: Quantity) -> tuple[int, bool]:
    """``AsScale(0)``: the value rounded away from zero to a whole number, and whether that was exact."""
    if q.exponent >= 0:
        return q.unscaled * 10**q.exponent, True
    magnitude, remainder = divmod(abs(q.unscaled), 10**-q.exponent)
    if remainder:
        magnitude += 1
    return (magnitude if q.unscaled > 0 else -magnitude), not remainder
