"""Self-signed certificate authority and serving certificate for the simulator's HTTPS endpoint.

Called by :class:`gpuplan.sim.api.server.ApiServer` when it serves TLS. The CA certificate goes into the
kubeconfig (``certificate-authority-data``), so kubectl and the official Python client verify the server
exactly as they verify a real cluster: the serving certificate is signed by that CA and names 127.0.0.1 and
localhost in its subjectAltName (clients ignore the CN). Nothing here touches the disk except
:func:`write_pair`, which the server uses because ``ssl.SSLContext.load_cert_chain`` only reads files.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Short-lived on purpose: a simulator runs for minutes or days, never for years, and a one-year validity keeps
# a leaked kubeconfig from a test run harmless for long.
_VALIDITY = datetime.timedelta(days=365)
# Clock skew between the process that signs and the clients that verify is zero here, but kubectl compares
# notBefore with its own clock to the second; starting a minute early avoids a "not yet valid" race.
_BACKDATE = datetime.timedelta(minutes=1)


@dataclass(frozen=True)
class ServingCertificates:
    """PEM bytes of the CA certificate and of the serving certificate chain and its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpuplan-sim"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds, unlike RSA, which keeps simulator start-up fast in tests.
    return ec.generate_private_key(ec.SECP256R1())


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> x509.Certificate:
    name = _name("gpuplan-sim-ca")
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns_names: tuple[str, ...] = ("localhost",),
) -> x509.Certificate:
    alt_names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    alt_names += [x509.DNSName(name) for name in dns_names]
    return (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def generate(
    ips: tuple[str, ...] = ("127.0.0.1",), dns_names: tuple[str, ...] = ("localhost",)
) -> ServingCertificates:
    """A fresh CA and a serving certificate for ``ips`` and ``dns_names`` (127.0.0.1 and localhost) signed
    by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = _new_key(), _new_key()
    ca = _ca_certificate(ca_key, now)
    cert = _serving_certificate(key, ca, ca_key, now, ips, dns_names)
    encoding = serialization.Encoding.PEM
    return ServingCertificates(
        ca_pem=ca.public_bytes(encoding), cert_pem=cert.public_bytes(encoding), key_pem=private_pem(key)
    )


def new_signing_key() -> ec.EllipticCurvePrivateKey:
    """A P-256 key, as a service-account token signer (kube-apiserver accepts ES256 signing keys)."""
    return _new_key()


def private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    encoding = serialization.Encoding.PEM
    return key.private_bytes(encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_pair(certs: ServingCertificates, folder: Path) -> tuple[Path, Path]:
    """Write the serving certificate and key (mode 0600) into ``folder``; returns (cert path, key path)."""
    cert_path, key_path = folder / "serving.crt", folder / "serving.key"
    cert_path.write_bytes(certs.cert_pem)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(certs.key_pem)
    return cert_path, key_path
