"""The TLS listener's certificates: a deployment CA and a server certificate it signs, made at the
first `computeall up --public` and kept in `<data dir>/security/tls/` (keys mode 0600).

Clients trust only this CA, pinned by its fingerprint (an invite carries both), and check the
server's name `SERVER_NAME` rather than the address they dialled: a machine reached by any of its
addresses presents the same certificate. A remote site's leaf server cannot be told that name
(nats-server checks the address a leaf dials), so the certificate also names the addresses the
server listens on (`ensure(addresses)`); it is made again, by the same CA, when one is missing.

The same certificate authenticates the server on its routes to the bus's other servers, where TLS is
mutual (`server_config.RouteTls`): it is made for both ends of a connection (server and client auth).
A server another machine runs holds the CA's key too (`install_ca`, from the server kit an authority
hands an invited server, `bus_join.py`), so that it can make its own certificate, naming its own
addresses, and any surviving server's machine can admit a replacement.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from computeall.protocol.credentials import TlsTrust, ca_fingerprint

from .server_config import TlsFiles

SERVER_NAME = "computeall-nats"
VALID_DAYS = 3650
# a server certificate is presented by the server (to clients, leaves and routes it accepts) and by the
# client end of a route it dials, which the other server verifies as mutual TLS does
ROUTE_USAGES = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)


class DeploymentTls:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca_file = directory / "ca.pem"
        self.ca_key_file = directory / "ca-key.pem"
        self.cert_file = directory / "server.pem"
        self.key_file = directory / "server-key.pem"

    def ensure(self, addresses: list[str] = ()) -> TlsFiles:
        """The server's certificate and key, made (with the CA) on first use, and again when it does not
        name every one of `addresses` (IP addresses or host names other machines dial)."""
        if not self.ca_file.exists():
            self._make_ca()
        wanted = _names(addresses)
        if not self.cert_file.exists() or not set(wanted) <= set(self._server_names()) or not self._both_ends():
            self._make_server_cert(wanted)
        return TlsFiles(cert_file=str(self.cert_file), key_file=str(self.key_file))

    def _server_names(self) -> list[x509.GeneralName]:
        cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        return list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)

    def _both_ends(self) -> bool:
        """Whether the certificate serves both ends of a route (one made before routes crossed machines did not)."""
        cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        return set(ROUTE_USAGES) <= set(usage)

    def install_ca(self, ca_pem: str, ca_key_pem: str) -> None:
        """Take the deployment's CA (an invited server's kit); a certificate another CA made goes."""
        if self.ca_file.exists() and self.ca_file.read_text() == ca_pem:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_private(self.ca_key_file, ca_key_pem.encode())
        self.ca_file.write_text(ca_pem)
        self.cert_file.unlink(missing_ok=True)

    def trust(self) -> TlsTrust:
        """What a client pins: the CA (made on first use), its fingerprint, the server's name."""
        self.ensure()
        ca_pem = self.ca_file.read_text()
        return TlsTrust(ca_pem=ca_pem, ca_sha256=ca_fingerprint(ca_pem), server_name=SERVER_NAME)

    def _make_ca(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "computeall deployment CA")])
        cert = (
            _builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256())
        )
        _write_key(self.ca_key_file, key)
        self.ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def _make_server_cert(self, addresses: list[x509.GeneralName]) -> None:
        ca_key = serialization.load_pem_private_key(self.ca_key_file.read_bytes(), password=None)
        ca = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        names = list(dict.fromkeys([*_names([SERVER_NAME, "localhost", "127.0.0.1"]), *addresses]))
        cert = (
            _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)]), ca.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(list(ROUTE_USAGES)), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write_key(self.key_file, key)
        self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _names(addresses: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for address in addresses:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            out.append(x509.DNSName(address))
    return out


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _write_key(path: Path, key) -> None:
    _write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


def _write_private(path: Path, pem: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
