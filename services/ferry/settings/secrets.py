"""Secrets in settings: a value (env, YAML) or a file readable by its owner only.

Every secret Ferry holds (Kafka SASL password, tracker bearer token) is a pydantic ``SecretStr``:
its ``repr``/``str`` is ``**********``, so a settings object in a log line, an exception or a
traceback never shows it; only :meth:`SecretStr.get_secret_value`, called where a client is
configured, does. A secret file must have no permission bit for group or others (mode ``0600``
or ``0400``), as OpenSSH requires of private keys; anything wider is refused before it is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pydantic import SecretStr

from ferry.errors import ConfigError


def read_secret_file(path: Path, what: str) -> SecretStr:
    """The content of ``path`` (one trailing newline removed) as a secret.

    Args:
        what: the setting's name, for the message (e.g. ``kafka.sasl_password_file``).

    Raises:
        ConfigError: the file is missing, not a regular file, readable or writable by group or
            others (its mode is named, never its content), or empty.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot stat {path} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what}: {path} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{what}: {path} has mode {mode:04o}; a secret file must be readable by its owner "
            "only (chmod 600); refused"
        )
    value = path.read_text(encoding="utf-8").removesuffix("\n")
    if not value:
        raise ConfigError(f"{what}: {path} is empty")
    return SecretStr(value)


def resolve_secret(value: SecretStr | None, path: Path | None, what: str) -> SecretStr | None:
    """``value`` if set, else the content of ``path`` (:func:`read_secret_file`), else ``None``.

    Raises:
        ConfigError: both are set (ambiguous), or the file is refused.
    """
    if value is not None and path is not None:
        raise ConfigError(f"{what}: set either the value or the file, not both")
    if path is not None:
        return read_secret_file(path, what)
    return value
