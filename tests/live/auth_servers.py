"""nats-servers configured for each way a client authenticates, for the connection-option tests.

Each ``AuthCase`` is a server config file (written next to the server's store), the jsspark
options that connect to it, options that must be refused, and the secret strings that must never
show up anywhere. Everything is generated per run: TLS certificates with ``cryptography`` (a CA,
a server certificate for 127.0.0.1 and a client certificate), nkeys with ``nkeys``, and for the
creds case a complete operator/JWT setup (operator, system account, a JetStream-enabled account
and its user, signed as nsc would, served by the server's memory resolver).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import nkeys

from jsspark.nats_server import NatsServer


@dataclass
class AuthCase:
    name: str
    config: str  # server config file text
    good: dict[str, str]  # jsspark connection options that authenticate
    bad: dict[str, str]  # options the server refuses
    secrets: list[str] = field(default_factory=list)  # must never appear in any text

    def start(self, root: Path) -> NatsServer:
        store = root / f"store-{self.name}"
        store.mkdir(parents=True, exist_ok=True)
        conf = root / f"{self.name}.conf"
        conf.write_text(self.config)
        return NatsServer(store_dir=store, extra_args=["-c", str(conf)]).start()


# -- nkeys and JWTs ------------------------------------------------------------------------------
def new_key(prefix: int) -> tuple[str, str, nkeys.KeyPair]:
    """(seed, public key, key pair) of a fresh nkey with the role ``prefix``."""
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    kp = nkeys.from_seed(bytearray(seed))
    return seed.decode(), kp.public_key.decode(), kp


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed_jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, object]) -> str:
    """A NATS v2 JWT (``ed25519-nkey``) as nsc writes it: jti is the claims' SHA-512/256."""
    claims: dict[str, object] = {"jti": "", "iat": int(time.time()), "iss": issuer.public_key.decode(),
                                 "name": name, "sub": subject, "nats": {**nats, "version": 2}}
    digest = hashlib.new("sha512_256", json.dumps(claims, separators=(",", ":")).encode()).digest()
    claims["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{_b64(issuer.sign(f'{head}.{body}'.encode()))}"


def creds_file(path: Path, user_jwt: str, seed: str) -> Path:
    path.write_text(f"""-----BEGIN NATS USER JWT-----
{user_jwt}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{seed}
------END USER NKEY SEED------

*************************************************************
""")
    return path


# -- TLS -----------------------------------------------------------------------------------------
def make_certs(root: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def key_pem(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        return path

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None,
             issuer_key: ec.EllipticCurvePrivateKey, ca: bool, usage: list[x509.ObjectIdentifier],
             sans: list[x509.GeneralName]) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if usage:
            b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False,
                                              data_encipherment=False, key_agreement=False,
                                              encipher_only=False, decipher_only=False), critical=True)
        return b.sign(issuer_key, hashes.SHA256())

    def write(c: x509.Certificate, path: Path) -> Path:
        path.write_bytes(c.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("jsspark test CA", ca_key, None, ca_key, True, [], [])
    srv_key, cli_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    srv = cert("127.0.0.1", srv_key, ca.subject, ca_key, False, [ExtendedKeyUsageOID.SERVER_AUTH],
               [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    cli = cert("jsspark client", cli_key, ca.subject, ca_key, False, [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    return {
        "ca": write(ca, root / "ca.pem"),
        "server_cert": write(srv, root / "server.pem"), "server_key": key_pem(srv_key, root / "server-key.pem"),
        "client_cert": write(cli, root / "client.pem"), "client_key": key_pem(cli_key, root / "client-key.pem"),
    }


def _pem_body(path: Path) -> str:
    """The base64 body of a PEM key: a secret that must not appear anywhere."""
    return "".join(line for line in path.read_text().splitlines() if not line.startswith("-----"))


# -- the cases -----------------------------------------------------------------------------------
def auth_cases(root: Path) -> list[AuthCase]:
    root.mkdir(parents=True, exist_ok=True)
    cases = [
        AuthCase("userpass", 'authorization { user: "alice", password: "pw-Alice-s3cr3t" }',
                 {"user": "alice", "password": "pw-Alice-s3cr3t"}, {"user": "alice", "password": "pw-Wrong-s3cr3t"},
                 ["pw-Alice-s3cr3t", "pw-Wrong-s3cr3t"]),
        AuthCase("token", 'authorization { token: "tok-s3cr3t-4711" }',
                 {"token": "tok-s3cr3t-4711"}, {"token": "tok-wrong-0815"}, ["tok-s3cr3t-4711", "tok-wrong-0815"]),
    ]
    seed, pub, _ = new_key(nkeys.PREFIX_BYTE_USER)
    other, _, _ = new_key(nkeys.PREFIX_BYTE_USER)
    cases.append(AuthCase("nkey", f'authorization {{ users = [ {{ nkey: "{pub}" }} ] }}',
                          {"nkeySeed": seed}, {"nkeySeed": other}, [seed, other]))

    (root / "certs").mkdir(exist_ok=True)
    certs = make_certs(root / "certs")
    tls = (f'tls {{ cert_file: "{certs["server_cert"]}", key_file: "{certs["server_key"]}", '
           f'ca_file: "{certs["ca"]}", verify: true, timeout: 2 }}')
    cases.append(AuthCase("tls", tls,
                          {"tlsCa": str(certs["ca"]), "tlsCert": str(certs["client_cert"]),
                           "tlsKey": str(certs["client_key"])},
                          {"tlsCa": str(certs["ca"])},  # no client certificate: verify refuses
                          [_pem_body(certs["client_key"]), _pem_body(certs["server_key"])]))

    _, op_pub, op = new_key(nkeys.PREFIX_BYTE_OPERATOR)
    _, sys_pub, _ = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    _, acc_pub, acc = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    _, _, stranger = new_key(nkeys.PREFIX_BYTE_ACCOUNT)  # an account the server does not know
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                 "conn": -1, "leaf": -1}
    js = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    op_jwt = signed_jwt(op, op_pub, "jsspark-op", {"type": "operator", "system_account": sys_pub})
    sys_jwt = signed_jwt(op, sys_pub, "SYS", {"type": "account", "limits": unlimited})
    acc_jwt = signed_jwt(op, acc_pub, "APP", {"type": "account", "limits": {**unlimited, **js}})
    user = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
    useed, upub, _ = new_key(nkeys.PREFIX_BYTE_USER)
    bseed, bpub, _ = new_key(nkeys.PREFIX_BYTE_USER)
    good = creds_file(root / "app.creds", signed_jwt(acc, upub, "app", user), useed)
    bad = creds_file(root / "stranger.creds", signed_jwt(stranger, bpub, "stranger", user), bseed)
    (root / "operator.jwt").write_text(op_jwt)
    config = (f'operator: "{root / "operator.jwt"}"\nsystem_account: {sys_pub}\nresolver: MEMORY\n'
              f'resolver_preload: {{\n  {sys_pub}: "{sys_jwt}"\n  {acc_pub}: "{acc_jwt}"\n}}\n')
    cases.append(AuthCase("creds", config, {"creds": str(good)}, {"creds": str(bad)}, [useed, bseed]))
    return cases
