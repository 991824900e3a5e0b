"""The stack's servers get ``KitSettings.server_java_options`` after ``java`` (by default the
executors' options: the serial collector, C2 for hot code only); a command that is not ``java`` is
launched as given."""

from __future__ import annotations

from pathlib import Path

from ferry_kit.settings import SERVER_JAVA_OPTIONS, get_kit_settings
from ferry_kit.stack.base import Layout
from ferry_kit.stack.components import build_components


def test_layout_puts_the_options_after_java_and_before_the_components_own(tmp_path: Path) -> None:
    lay = Layout(tmp_path, ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"))
    launch = lay.launch("zookeeper", ["/usr/lib/jvm/bin/java", "-Xmx128m", "Main"])
    assert launch.argv == [
        "/usr/lib/jvm/bin/java",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-Xmx128m",
        "Main",
    ]
    assert lay.launch("kdc", ["/usr/sbin/krb5kdc", "-n"]).argv == ["/usr/sbin/krb5kdc", "-n"]
    assert Layout(tmp_path).launch("x", ["java", "-Xmx1m"]).argv == ["java", "-Xmx1m"]


def test_every_server_jvm_gets_the_settings_options(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_VAR_DIR", str(tmp_path))
    comps = build_components(get_kit_settings())
    jvms = [c for c in comps if Path(c.launch.argv[0]).name == "java"]
    assert len(jvms) >= 11  # ZooKeeper, broker, 2 NameNodes, 2 DataNodes, 3 Spark, metastore, HS2
    opts = SERVER_JAVA_OPTIONS.split()
    assert opts[0] == "-XX:+UseSerialGC" and len(opts) == 5
    assert {tuple(c.launch.argv[1:6]) for c in jvms} == {tuple(opts)}
    monkeypatch.setenv("FERRY_SERVER_JAVA_OPTIONS", "")
    [kafka] = [c for c in build_components(get_kit_settings()) if c.name == "kafka"]
    assert kafka.launch.argv[1] == "-Xmx512m"  # empty: the JVM's defaults, nothing inserted
