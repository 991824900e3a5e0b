"""Cross-realm trust in the settings, Ferry's Hadoop client keys and the local KDC's configuration
(no server; tests/secure/test_cross_realm.py runs the real KDC and clusters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ferry.clusters.kerberos import hadoop_client_conf
from ferry.settings.kerberos import KerberosSettings
from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackKerberos
from ferry_kit.stack import kdc
from ferry_kit.stack.base import Layout
from ferry_kit.stack.components import build_components
from ferry_kit.stack.servers import hdfs_conf

PARTNER = "PARTNER.FERRY.LOCAL"


def test_one_realm_keeps_hadoops_default_mapping() -> None:
    krb = StackKerberos(enabled=True)
    assert krb.auth_to_local == "DEFAULT"
    assert "hadoop.security.auth_to_local" not in hadoop_client_conf(krb)


def test_only_ferrys_name_is_mapped_in_the_trusted_and_its_own_foreign_realm() -> None:
    krb = StackKerberos(
        enabled=True, trusted_realms=[PARTNER, "FERRY.LOCAL"], principal="svc@CORP.EXAMPLE.COM"
    )
    rules = (
        "RULE:[1:$1@$0](svc@PARTNER\\.FERRY\\.LOCAL)s/@.*//\n"
        "RULE:[1:$1@$0](svc@CORP\\.EXAMPLE\\.COM)s/@.*//\n"
        "DEFAULT"
    )
    assert (krb.client_realm, krb.auth_to_local) == ("CORP.EXAMPLE.COM", rules)
    assert hadoop_client_conf(krb)["hadoop.security.auth_to_local"] == rules


def test_a_two_component_principal_maps_to_its_first_component_whatever_its_host() -> None:
    krb = StackKerberos(enabled=True, principal="svc-ferry/edge1@CORP.EXAMPLE.COM")
    assert krb.auth_to_local == ("RULE:[2:$1@$0](svc\\-ferry@CORP\\.EXAMPLE\\.COM)s/@.*//\nDEFAULT")


@pytest.mark.parametrize("realm", ["partner.local", "A..B", "", "A B"])
def test_a_realm_that_is_not_upper_case_labels_is_refused(realm: str) -> None:
    with pytest.raises(ValidationError, match="a realm is upper case"):
        StackKerberos(trusted_realms=[realm])


def test_the_stacks_servers_map_the_trusted_realms(tmp_path: Path) -> None:
    krb = StackKerberos(enabled=True, trusted_realms=[PARTNER])
    d = hdfs_conf(Layout(tmp_path), "a", KitSettings().cluster("a"), krb=krb)
    rule = "RULE:[1:$1@$0](ferry@PARTNER\\.FERRY\\.LOCAL)s/@.*//\nDEFAULT"
    line = f"<name>hadoop.security.auth_to_local</name><value>{rule}</value>"
    assert line in (d / "core-site.xml").read_text()


def test_the_kdc_serves_every_realm_from_a_database_each_with_direct_trust(tmp_path: Path) -> None:
    krb = StackKerberos(enabled=True, trusted_realms=[PARTNER], kdc_port=17088)
    lay = Layout(tmp_path)
    blocks = kdc._conf_blocks(krb, lay)
    assert blocks["capaths"] == (
        "  FERRY.LOCAL = {\n    PARTNER.FERRY.LOCAL = .\n  }\n"
        "  PARTNER.FERRY.LOCAL = {\n    FERRY.LOCAL = .\n  }\n"
    )
    assert blocks["realm_kdcs"] == (
        "  FERRY.LOCAL = {\n    kdc = 127.0.0.1:17088\n  }\n"
        "  PARTNER.FERRY.LOCAL = {\n    kdc = 127.0.0.1:17088\n  }\n"
    )
    dbs = blocks["realm_databases"]
    assert f"database_name = {tmp_path}/data/kdc/principal\n" in dbs
    assert f"database_name = {tmp_path}/data/kdc/{PARTNER}/principal\n" in dbs
    assert kdc._conf_blocks(StackKerberos(enabled=True), lay)["capaths"] == ""
    settings = KitSettings(var_dir=tmp_path, kerberos=krb)
    comp = {c.name: c for c in build_components(settings)}["kdc"]
    argv = comp.launch.argv
    script = argv[argv.index("-c") + 1]
    assert script.endswith(f"-n -r FERRY.LOCAL -r {PARTNER} & wait $!")


def test_a_principal_of_a_realm_the_kdc_does_not_serve_is_refused(tmp_path: Path) -> None:
    settings = KitSettings(var_dir=tmp_path, kerberos=StackKerberos(enabled=True))
    with pytest.raises(StackError, match=r"ferry@OTHER\.LOCAL: not a principal of FERRY\.LOCAL"):
        kdc.add_principal(settings, Layout(tmp_path), "ferry@OTHER.LOCAL", tmp_path / "k")


def test_the_stack_refuses_a_ferry_principal_of_a_realm_it_does_not_serve(tmp_path: Path) -> None:
    krb = StackKerberos(enabled=True, principal="svc@CORP.EXAMPLE.COM")
    settings = KitSettings(var_dir=tmp_path, kerberos=krb)
    with pytest.raises(
        Exception, match=r"svc@CORP\.EXAMPLE\.COM: the local KDC serves FERRY\.LOCAL"
    ):
        kdc.prepare_realm(settings, Layout(tmp_path))


def test_two_trusted_realms_reach_each_other_through_the_clusters_realm(tmp_path: Path) -> None:
    krb = StackKerberos(enabled=True, trusted_realms=["P.LOCAL", "Q.LOCAL"])
    assert kdc._conf_blocks(krb, Layout(tmp_path))["capaths"] == (
        "  FERRY.LOCAL = {\n    P.LOCAL = .\n    Q.LOCAL = .\n  }\n"
        "  P.LOCAL = {\n    FERRY.LOCAL = .\n    Q.LOCAL = FERRY.LOCAL\n  }\n"
        "  Q.LOCAL = {\n    FERRY.LOCAL = .\n    P.LOCAL = FERRY.LOCAL\n  }\n"
    )


class FakeKadmin:
    """Stands for ``kadmin.local``: records (argv, stdin) and answers like it for the
    principals in ``existing`` (realm, name)."""

    def __init__(self, existing: set[tuple[str, str]]) -> None:
        self.existing = set(existing)
        self.calls: list[tuple[list[str], str]] = []

    def __call__(self, argv: list[str], *, input: str, **_: object) -> object:  # noqa: A002
        import subprocess

        self.calls.append((argv, input))
        realm, (verb, *args) = argv[argv.index("-r") + 1], input.split()
        name = args[-1]
        out = ""
        if verb == "getprinc" and (realm, name) in self.existing:
            out = f"Principal: {name}\n"
        elif verb == "addprinc":
            self.existing.add((realm, name))
            out = f'kadmin.local:  {input}Principal "{name}" created.\n'
        elif verb == "delprinc":
            self.existing.discard((realm, name))
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_a_partial_trust_is_replaced_whole_with_one_password_given_on_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, to, back = "FERRY.LOCAL", f"krbtgt/{PARTNER}@FERRY.LOCAL", f"krbtgt/FERRY.LOCAL@{PARTNER}"
    fake = FakeKadmin({(home, to), (home, back)})  # the partner's database was recreated
    monkeypatch.setattr(kdc.subprocess, "run", fake)
    monkeypatch.setattr(kdc, "_tool", lambda name: f"/usr/sbin/{name}")
    krb = StackKerberos(enabled=True, trusted_realms=[PARTNER])
    kdc._ensure_trust(krb, Layout(tmp_path), PARTNER)
    writes = [(a[a.index("-r") + 1], q.split()) for a, q in fake.calls if "getprinc" not in q]
    passwords = {q[2] for _, q in writes if q[0] == "addprinc"}
    assert [(r, q[0], q[-1]) for r, q in writes] == [
        (home, "delprinc", to),
        (home, "addprinc", to),
        (home, "delprinc", back),
        (home, "addprinc", back),
        (PARTNER, "addprinc", to),
        (PARTNER, "addprinc", back),
    ]
    assert len(passwords) == 1 and len(next(iter(passwords))) >= 32
    assert [a for a, _ in fake.calls if any(p in " ".join(a) for p in passwords)] == []
    fake.calls.clear()
    kdc._ensure_trust(krb, Layout(tmp_path), PARTNER)  # whole now: only looked at
    assert {q.split()[0] for _, q in fake.calls} == {"getprinc"}


def test_a_principal_the_cluster_does_not_map_is_a_refusal_and_an_empty_answer_is_asked_why() -> (
    None
):
    from hdfs.util import HdfsError

    from ferry.clusters.hdfs.errors import classify, empty_answer
    from ferry.errors import AuthenticationFailed

    page = (
        "<html><head><title>Error 500 org.apache.hadoop.security.authentication.util.KerberosName"
        "$NoMatchingRule: No rules applied to hdfs@PARTNER.FERRY.LOCAL</title></head></html>"
    )
    err = classify("op", HdfsError(page), netloc="nn:1", is_datanode=False, timeout=(1, 1))
    assert (type(err), str(err)) == (
        AuthenticationFailed,
        "op: the cluster maps hdfs@PARTNER.FERRY.LOCAL to no user (No rules applied: its "
        "hadoop.security.auth_to_local has no rule for this principal)",
    )
    assert [empty_answer(e) for e in (HdfsError(b""), HdfsError(" "), HdfsError(page))] == [
        True,
        True,
        False,
    ]
    assert empty_answer(HdfsError("", exception="StandbyException")) is False


def _kdc_a(tmp_path: Path, **more: object) -> KerberosSettings:
    """Cluster A's KDC of the compose deployment: realm A here, realm B on host kdc-b."""
    fields: dict[str, object] = {
        "enabled": True,
        "realm": "A.FERRY.LOCAL",
        "service_host": "namenode-a",
        "kdc_host": "kdc-a",
        "trusted_realms": ["B.FERRY.LOCAL"],
        "realm_kdcs": {"B.FERRY.LOCAL": "kdc-b:17088"},
        "domain_realm": {"namenode-b": "B.FERRY.LOCAL"},
    }
    return StackKerberos(**(fields | more))  # type: ignore[arg-type]


def test_a_realm_served_by_another_host_gets_its_kdc_and_no_database_here(tmp_path: Path) -> None:
    krb = _kdc_a(tmp_path)
    blocks = kdc._conf_blocks(krb, Layout(tmp_path))
    assert blocks["realm_kdcs"] == (
        "  A.FERRY.LOCAL = {\n    kdc = kdc-a:17088\n  }\n"
        "  B.FERRY.LOCAL = {\n    kdc = kdc-b:17088\n  }\n"
    )
    assert blocks["realm_databases"].count("database_name") == 1
    assert blocks["realm_databases"].startswith("  A.FERRY.LOCAL = {\n")
    assert blocks["domain_realm"] == (
        "  namenode-a = A.FERRY.LOCAL\n  127.0.0.1 = A.FERRY.LOCAL\n  namenode-b = B.FERRY.LOCAL\n"
    )
    assert blocks["capaths"] == (
        "  A.FERRY.LOCAL = {\n    B.FERRY.LOCAL = .\n  }\n"
        "  B.FERRY.LOCAL = {\n    A.FERRY.LOCAL = .\n  }\n"
    )
    settings = KitSettings(var_dir=tmp_path, kerberos=krb)
    argv = {c.name: c for c in build_components(settings)}["kdc"].launch.argv
    assert argv[argv.index("-c") + 1].endswith("-n -r A.FERRY.LOCAL & wait $!")
    with pytest.raises(StackError, match=r"ferry@B\.FERRY\.LOCAL: not a principal of A\.FERRY"):
        kdc.add_principal(settings, Layout(tmp_path), "ferry@B.FERRY.LOCAL", tmp_path / "k")


def test_the_half_of_a_trust_with_another_kdc_is_made_once_from_the_shared_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "trust.password"
    secret.write_text("s3cret-shared-by-both-kdcs\n")
    a, b = "A.FERRY.LOCAL", "B.FERRY.LOCAL"
    fake = FakeKadmin(set())
    monkeypatch.setattr(kdc.subprocess, "run", fake)
    monkeypatch.setattr(kdc, "_tool", lambda name: f"/usr/sbin/{name}")
    krb = _kdc_a(tmp_path, trust_password_file=secret)
    kdc._ensure_remote_trust(krb, Layout(tmp_path), b)
    adds = [(a_[a_.index("-r") + 1], q.split()) for a_, q in fake.calls if "addprinc" in q]
    assert adds == [
        (a, ["addprinc", "-pw", "s3cret-shared-by-both-kdcs", f"krbtgt/{b}@{a}"]),
        (a, ["addprinc", "-pw", "s3cret-shared-by-both-kdcs", f"krbtgt/{a}@{b}"]),
    ]
    assert [argv for argv, _ in fake.calls if "s3cret" in " ".join(argv)] == []
    fake.calls.clear()
    kdc._ensure_remote_trust(krb, Layout(tmp_path), b)  # made: only looked at
    assert {q.split()[0] for _, q in fake.calls} == {"getprinc"}


@pytest.mark.parametrize("content", [None, ""])
def test_a_trust_with_another_kdc_needs_a_password_file_that_says_something(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    monkeypatch.setattr(kdc.subprocess, "run", FakeKadmin(set()))
    monkeypatch.setattr(kdc, "_tool", lambda name: f"/usr/sbin/{name}")
    secret = tmp_path / "trust.password"
    if content is not None:
        secret.write_text(content)
        match = "trust.password' is empty"
    else:
        match = r"serves B\.FERRY\.LOCAL elsewhere: set kerberos\.trust_password_file"
    krb = _kdc_a(tmp_path, trust_password_file=secret if content is not None else None)
    with pytest.raises(StackError, match=match):
        kdc._ensure_remote_trust(krb, Layout(tmp_path), "B.FERRY.LOCAL")


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("realm_kdcs", {"b.local": "kdc-b:88"}, "a realm is upper case"),
        ("realm_kdcs", {"B.LOCAL": "kdc-b"}, "expected host:port"),
        ("domain_realm", {"namenode-b": "b.local"}, "maps to an upper-case realm"),
    ],
)
def test_kdc_addresses_and_host_realms_are_checked(field: str, value: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        StackKerberos(**{field: value})  # type: ignore[arg-type]


def test_each_host_a_webhdfs_client_dials_in_this_realm_gets_its_http_principal() -> None:
    clusters = {
        "a": {"host": "namenode-a", "datanode_host_override": "datanode-a"},
        "b": {"host": "namenode-b", "datanode_host_override": "datanode-b"},
    }
    krb = _kdc_a(
        Path("."), domain_realm={"namenode-b": "B.FERRY.LOCAL", "datanode-b": "B.FERRY.LOCAL"}
    )
    settings = KitSettings(kerberos=krb, clusters=clusters)  # type: ignore[arg-type]
    assert kdc._principals(settings) == [
        "hdfs/namenode-a@A.FERRY.LOCAL",
        "HTTP/namenode-a@A.FERRY.LOCAL",
        "HTTP/127.0.0.1@A.FERRY.LOCAL",
        "HTTP/datanode-a@A.FERRY.LOCAL",
    ]
    local = KitSettings(kerberos=StackKerberos(enabled=True))
    assert kdc._principals(local) == [
        "hdfs/localhost@FERRY.LOCAL",
        "HTTP/localhost@FERRY.LOCAL",
        "HTTP/127.0.0.1@FERRY.LOCAL",
    ]
