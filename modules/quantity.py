"""Kubernetes resource quantities: what the API server accepts, and the value it stores.

One grammar for the spec's check (:mod:`gpuplan.modules.values`) and the diff's comparison
(:mod:`gpuplan.planner.diff.normalize`). It is ``resource.ParseQuantity`` of
k8s.io/apimachinery/pkg/api/resource/quantity.go (v0.37.2) and suffix.go:

- a signed number: ``1``, ``+1``, ``-1``, ``1.5``, ``5.``, ``.5`` (the doc comment's ``<number>``; the scanner
  also lets ``.`` and a bare sign through as zero, which the documented grammar refuses and so does gpuplan);
- then at most one suffix: binary SI ``Ki Mi Gi Ti Pi Ei``, decimal SI ``n u m k M G T P E`` (or none), or a
  decimal exponent ``e``/``E`` with a signed whole number (``2e9``, ``1E3``, ``1e-1``; the scanner reads only
  digits after the sign, so ``1e1.5`` is refused, and a lone ``e`` is no suffix). ``1E`` is 10^18 (exa).

The server stores a quantity in canonical form (``0.1`` -> ``100m``, ``2e9`` -> ``2G``, ``1.5Gi`` ->
``1536Mi``): :func:`quantity_value` is the number, so two spellings compare equal. Parsing rounds a value up
(away from zero) to a multiple of 1n, and ``SetDefaults_ResourceList`` (pkg/apis/core/v1/defaults.go, v1.37.2)
rounds the quantities of resource lists (container requests and limits, pod overhead) up to 1m. A binary-SI
amount is capped at 2^63-1.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext
from typing import Any

QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"  # the signed number
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"  # binary SI, decimal SI, decimal exponent
)
# suffix.go's tables: a binary suffix multiplies by a power of 2, a decimal one shifts the decimal point
_BINARY = {f"{prefix}i": Decimal(2) ** (10 * power) for power, prefix in enumerate("KMGTPE", start=1)}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# ParseQuantity caps a binary-SI amount at this magnitude ("9Ei" is stored as 9223372036854775807)
MAX_BINARY = Decimal(2**63 - 1)
NANO = Decimal("1e-9")
MILLI = Decimal("1e-3")


def quantity_value(text: Any, *, step: Decimal = NANO) -> Decimal | None:
    """The number a quantity stands for, rounded up (away from zero) to a multiple of ``step`` as the server
    stores it; None if ``text`` is not a quantity. An int or float (YAML's ``cpu: 2``) counts as its text."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        return None
    match = QUANTITY.fullmatch(str(text))  # not .match: "$" also matches before a final newline
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    # exact arithmetic for every value the server can hold (int64 at nano scale is 28 digits, 2^63 Ei more)
    with localcontext(prec=80):
        try:
            if suffix in _BINARY:
                value = Decimal(number) * _BINARY[suffix]
                if abs(value) > MAX_BINARY:
                    value = MAX_BINARY.copy_sign(value)
            else:  # decimal SI, or a decimal exponent (e3, E-1)
                shift = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
                value = Decimal(number).scaleb(shift)
            return (value / step).to_integral_value(rounding=ROUND_UP) * step
        except (ArithmeticError, ValueError):  # an exponent beyond what a Decimal holds
            return None
