"""Hadoop's ``*-site.xml`` format, written by the local stack (daemons' configuration) and by the
Kerberos Spark sessions (their ``core-site.xml``; :mod:`ferry.clusters.spark_kerberos`)."""

from __future__ import annotations

from xml.sax.saxutils import escape


def xml_properties(props: dict[str, str]) -> str:
    """``<property>`` lines of a Hadoop ``*-site.xml`` for ``props`` (values XML-escaped)."""
    return "\n".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
        for k, v in props.items()
    )
